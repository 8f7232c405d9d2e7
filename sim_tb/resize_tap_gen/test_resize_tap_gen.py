"""cocotb testbench: hls/rtl/resize_tap_gen.v gives resize_tap()'s taps, bit for bit.

Reference: resize_tap() of hls/image/resize.h (the post-decode unit's C model, bit-exact with
cv2.resize's INTER_LINEAR coordinates: tests/sim_tb/test_float64_replacements.py checks its float64
emulation against the float64 expression), compiled behind sim_tb/image_postdecode/postdecode_ref.cpp,
in both modes (columns: weights clamped; rows: indices clamped). Vectors: every destination index
of every (src, dst) up to 32, of random pairs up to 8192, of pairs whose dst is a multiple of 2048
(where float32 rounding meets an exact tie), and the indices whose coordinate is exactly 0, where
float64 gives -2^-54 or +2^-54 instead. The harness (resize_tap_gen_tb.v) runs them by itself.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge

from sim_tb.cocotb_run import RTL, run_cocotb
from sim_tb.image_postdecode.test_image_postdecode import reference_library
from sim_tb.op_bulk.op_bulk import hex_lines, read_hex

UNIT = "resize_tap_gen"
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def vectors(rng: np.random.Generator) -> np.ndarray:
    """Rows {src, dst, d}, grouped by pair."""
    rows = [(s, t, d) for s in range(1, 33) for t in range(1, 33) for d in range(t)]
    pairs = [(int(s), int(t)) for s, t in rng.integers(1, 8193, (150, 2))]
    pairs += [(int(s), 2048 * int(k)) for s, k in zip(rng.integers(1, 8193, 60), rng.integers(1, 5, 60))]
    for s, t in pairs:
        rows += [(s, t, int(d)) for d in np.unique(rng.integers(0, t, 40))]
    # (2d + 1) * src = dst: the coordinate is exactly 0.
    rows += [(s, (2 * d + 1) * s, d) for s, d in [(1, 24), (1, 4000), (3, 51), (7, 300), (2, 2000)]]
    return np.array(rows, dtype=np.uint16)


def reference_taps(rows: np.ndarray) -> np.ndarray:
    """(n, 4) uint32: column {src1, src0}, {w1, w0}, then row {src1, src0}, {w1, w0}."""
    taps = np.zeros((len(rows), 8), np.uint16)
    reference_library().resize_taps_ref(rows.ctypes.data_as(ctypes.c_void_p), ctypes.c_long(len(rows)),
                                        taps.ctypes.data_as(ctypes.c_void_p))
    return taps.view(np.uint32)


@cocotb.test()
async def taps_bit_exact(dut):
    """Every tap of the vector file, column and row generator, equals resize_tap()'s."""
    await RisingEdge(dut.finished)
    await ClockCycles(dut.clk, 2)
    want = np.load(os.environ["TB_EXPECTED"])
    got = np.stack(read_hex(Path(os.environ["TB_RESULTS"]), 4), axis=1)
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"{bad.size} of {len(want)} taps differ; first at row {bad[0]}: {got[bad[0]]} != {want[bad[0]]}"
    dut._log.info("%d coordinates, both modes, bit-exact with resize_tap()", len(want))


def test_resize_tap_gen(tmp_path):
    rows = vectors(np.random.default_rng(2021))
    vector_file, result_file, expected_file = tmp_path / "vectors.hex", tmp_path / "results.hex", tmp_path / "expected.npy"
    src, dst, d = (rows[:, k].astype(np.uint32) for k in range(3))
    vector_file.write_bytes(hex_lines([src | dst << 16, d]))
    np.save(expected_file, reference_taps(rows))
    run_cocotb("resize_tap_gen_tb", [HERE / "resize_tap_gen_tb.v", RTL / "resize_tap_gen.v"], Path(__file__),
               {"COUNT": len(rows)}, tmp_path / "sim",
               {"TB_RESULTS": str(result_file), "TB_EXPECTED": str(expected_file)},
               [f"+vectors={vector_file}", f"+results={result_file}"])
