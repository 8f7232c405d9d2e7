"""Bulk checks of the RTL operators (fp32_add, fp32_mul, mel_mac, fft_butterfly, fp32_log).

Each unit's testbench builds its operand vectors and references with NumPy, and check_operator
streams them through sim_tb/op_bulk/op_bulk_tb.v at the simulator's own speed (one operation
per cycle, no Python per cycle), with random idle cycles and ap_ce stalls after a short calm
prefix on which latency and II are measured against the unit's blackbox descriptor. The cocotb
test that compares the results is sim_tb/op_bulk/test_op_bulk.py. Operands and results are
float32 bit patterns, one uint32 column per port.
"""

from __future__ import annotations

import ctypes
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from sim_tb.c_model import HLS, build_shared_library
from sim_tb.cocotb_run import RTL, descriptor_sources, run_cocotb

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

# One of each class of binary32 value, positive; SPECIALS has both signs.
SPECIAL_CLASSES = {
    "zero": 0x00000000,
    "min_subnormal": 0x00000001,
    "subnormal": 0x002AAAAB,
    "max_subnormal": 0x007FFFFF,
    "min_normal": 0x00800000,
    "one": 0x3F800000,
    "one_plus_ulp": 0x3F800001,
    "max_normal": 0x7F7FFFFF,
    "inf": 0x7F800000,
    "quiet_nan": 0x7FC01234,
    "signalling_nan": 0x7F801234,
}
SPECIALS = np.array([v | s for s in (0, 0x80000000) for v in SPECIAL_CLASSES.values()], dtype=np.uint32)
# `make test` streams a fifth of each unit's random vectors (every special case still);
# ATOLL_OP_VECTORS=full streams them all, the counts hls/rtl/README.md gives.
FULL_VECTORS = os.environ.get("ATOLL_OP_VECTORS") == "full"
CALM_COUNT = 256
IDLE_256 = 32  # one cycle in 8 without ap_start
STALL_256 = 32  # and one in 8 with ap_ce low


def random_count(full: int) -> int:
    """How many random vectors a unit's test streams: `full`, or a fifth of it (see above)."""
    return full if FULL_VECTORS else full // 5


def floats(rng: np.random.Generator, exponents: np.ndarray) -> np.ndarray:
    """Random signs and mantissas with the given biased exponent fields."""
    n = len(exponents)
    signs = rng.integers(0, 2, n, dtype=np.uint32) << 31
    mantissas = rng.integers(0, 1 << 23, n, dtype=np.uint32)
    return signs | (np.clip(exponents, 0, 255).astype(np.uint32) << 23) | mantissas


def uniform_bits(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)


def f32(bits: np.ndarray) -> np.ndarray:
    return bits.view(np.float32)


def x86(op, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """`op(x, y)` on float32 arrays as x86's SSE computes each element: where both are NaN, the
    first one, quieted. NumPy's SIMD loops give that in an array's body but the second operand's
    NaN in its last (masked) elements, so its answer depended on where the case fell."""
    out = op(x, y)
    both = np.isnan(x) & np.isnan(y)
    out[both] = (x[both].view(np.uint32) | np.uint32(0x00400000)).view(np.float32)
    return out


def is_nan(bits: np.ndarray) -> np.ndarray:
    return ((bits & 0x7F800000) == 0x7F800000) & ((bits & 0x7FFFFF) != 0)


def c_models() -> ctypes.CDLL:
    """The audio blackboxes' C models behind batch entry points (op_models.cpp)."""
    models = [HLS / "audio" / f"{unit}.cpp" for unit in ("fp32_add", "fp32_mul", "mel_mac", "fft_butterfly", "fp32_log")]
    headers = [*(HLS / "audio").glob("*.h"), *(HLS / "common").glob("*.h")]
    lib = ctypes.CDLL(str(build_shared_library([HERE / "op_models.cpp", *models], headers,
                                               REPO / "build" / "sim_tb" / "op_models", "op_models")))
    return lib


def c_model(name: str, operands: list[np.ndarray], n_results: int) -> list[np.ndarray]:
    """Runs <name>_batch over the operand columns; returns the result columns."""
    columns = [np.ascontiguousarray(c, np.uint32) for c in operands]
    results = [np.empty(len(columns[0]), np.uint32) for _ in range(n_results)]
    pointers = [c.ctypes.data_as(ctypes.c_void_p) for c in columns + results]
    getattr(c_models(), f"{name}_batch")(*pointers, ctypes.c_long(len(columns[0])))
    return results


def assert_same_bits(got: list[np.ndarray], want: list[np.ndarray], nan_payloads: bool = True) -> None:
    """Column by column equality; with nan_payloads False, any NaN equals any NaN."""
    for g, w in zip(got, want):
        differ = g != w
        if not nan_payloads:
            differ &= ~(is_nan(g) & is_nan(w))
        bad = np.flatnonzero(differ)
        assert bad.size == 0, f"{bad.size} results differ; first at {bad[0]}: {g[bad[0]]:#010x} != {w[bad[0]]:#010x}"


def hex_lines(columns: list[np.ndarray]) -> bytes:
    """One line per row, the columns concatenated as hex with column 0 in the low bits."""
    words = np.stack(columns[::-1], axis=1)  # most significant column first
    nibbles = (words[:, :, None] >> np.arange(28, -4, -4, dtype=np.uint32)) & 0xF
    digits = np.frombuffer(b"0123456789abcdef", np.uint8)[nibbles.reshape(len(words), -1)]
    return np.hstack([digits, np.full((len(words), 1), ord("\n"), np.uint8)]).tobytes()


def read_hex(path: Path, n_columns: int) -> list[np.ndarray]:
    """Columns of a $writememh file (its `// 0x<address>` comment lines skipped)."""
    rows = [line for line in path.read_text().splitlines() if line and not line.startswith("//")]
    text = np.array(rows, dtype=f"S{8 * n_columns}")
    digits = np.frombuffer(text.tobytes(), np.uint8).reshape(len(rows), n_columns, 8)
    values = np.where(digits >= ord("a"), digits - ord("a") + 10, digits - ord("0")).astype(np.uint32)
    words = (values << np.arange(28, -4, -4, dtype=np.uint32)).sum(axis=2, dtype=np.uint32)
    return [words[:, n_columns - 1 - k] for k in range(n_columns)]



def run_bulk(unit: str, operands: list[np.ndarray], expected: list[np.ndarray], build_dir: Path, calm: int) -> None:
    build_dir.mkdir(parents=True, exist_ok=True)
    operand_file, result_file, expected_file = build_dir / "operands.hex", build_dir / "results.hex", build_dir / "expected.npy"
    operand_file.write_bytes(hex_lines(operands))
    np.save(expected_file, np.stack(expected, axis=1))
    performance = json.loads((RTL / f"{unit}.json").read_text())["rtl_performance"]
    parameters = {"IN_WIDTH": 32 * len(operands), "OUT_WIDTH": 32 * len(expected), "COUNT": len(operands[0]),
                  "IDLE_256": IDLE_256, "STALL_256": STALL_256, "CALM": calm}
    sources = [HERE / "op_bulk_tb.v", HERE / "op_bulk_dut.v", *descriptor_sources(unit)]
    env = {"TB_RESULTS": str(result_file), "TB_EXPECTED": str(expected_file),
           "TB_LATENCY": performance["latency"], "TB_II": performance["II"]}
    run_cocotb("op_bulk_tb", sources, HERE / "test_op_bulk.py", parameters, build_dir / "sim", env,
               [f"+operands={operand_file}", f"+results={result_file}"], {f"OP_{unit.upper()}": 1})


def check_operator(unit: str, operands: list[np.ndarray], expected: list[np.ndarray], build_dir: Path) -> None:
    """Every vector through the unit (its descriptor's rtl_files), in two halves simulated side by
    side (one per core); the first CALM_COUNT of the first half without idle cycles or stalls
    (latency and II), the rest with."""
    half = len(operands[0]) // 2
    parts = [(slice(0, half), CALM_COUNT), (slice(half, None), 0)]
    with ThreadPoolExecutor(len(parts)) as pool:
        runs = [pool.submit(run_bulk, unit, [c[part] for c in operands], [c[part] for c in expected],
                            build_dir / f"part{k}", calm) for k, (part, calm) in enumerate(parts)]
        for run in runs:
            run.result()


def check_against_reference(unit: str, operands: list[np.ndarray], want: list[np.ndarray], build_dir: Path) -> None:
    """The C model equals the reference (NaN payloads aside: a compiler may commute operands),
    then the RTL equals it bit for bit through check_operator."""
    assert_same_bits(c_model(unit, operands, len(want)), want, nan_payloads=False)
    check_operator(unit, operands, want, build_dir)
