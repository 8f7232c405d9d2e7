"""cocotb testbench: hls/rtl/jpeg_entropy_decode.v decodes real JPEG scans exactly as the image CU's C++.

Reference: the CU's own header parser and entropy decoder (jpeg_markers.h, jpeg_huffman.h,
decode_scan's MCU and restart loop) behind entropy_ref.cpp. Each file's scan runs through the
harness jpeg_entropy_tb.v (tables written through the table port, the scan bytes in 8-byte beats
with random idle cycles on the input and backpressure on the output, or neither); every
coefficient block and the status must equal the reference's, within the harness's cycle limit.
Corrupt scans (truncated, a restart marker out of order, random bytes) must end CORRUPT.
The pytest function at the bottom runs one simulation per file on Icarus Verilog.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import cocotb
import numpy as np
import pytest
from cocotb.triggers import ClockCycles, RisingEdge

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
if str(REPO / "tests" / "fpga_host") not in sys.path:
    sys.path.insert(0, str(REPO / "tests" / "fpga_host"))

from sim_tb.cocotb_run import run_cocotb  # noqa: E402
from sim_tb.jpeg_entropy_decode import entropy_sim  # noqa: E402

CORRUPT = 2


@cocotb.test()
async def scan_decodes_like_the_cu(dut):
    """The harness's beats, as blocks, and its status equal the reference's; no hang."""
    await RisingEdge(dut.finished)
    await ClockCycles(dut.clk, 2)
    expected = np.load(os.environ["TB_EXPECTED"])
    got = entropy_sim.read_result(Path(os.environ["TB_COEFS"]))
    assert got.status != entropy_sim.STATUS_TIMEOUT, "the cycle limit ran out: the decoder hangs"
    assert got.status == int(expected["status"]), (got.status, int(expected["status"]))
    assert dut.dut.ap_idle.value == 1
    decoded = entropy_sim.blocks(got.beats)
    if got.status == CORRUPT:
        n = min(len(decoded), len(expected["blocks"]))
        np.testing.assert_array_equal(decoded[:n], expected["blocks"][:n])
    else:
        np.testing.assert_array_equal(decoded, expected["blocks"])
    dut._log.info("%d blocks, status %d, %d cycles for %d symbols (%.3f a symbol)", len(decoded), got.status,
                  got.last_beat, got.symbols, got.last_beat / max(got.symbols, 1))


def _files() -> dict[str, bytes]:
    import jpeg_corpus as jc  # the image-CU tests' corpus (tests/fpga_host)

    img = jc.natural_image
    good = {
        "cv2-420-q90-48x64": jc.encode_cv2(img(48, 64, 1), 90, "420"),
        "cv2-444-q75-33x31": jc.encode_cv2(img(33, 31, 2), 75, "444"),
        "cv2-422-q95-17x9": jc.encode_cv2(img(17, 9, 3), 95, "422"),
        "cv2-440-q50-15x16": jc.encode_cv2(img(15, 16, 4), 50, "440"),
        "cv2-gray-rst4-45x61": jc.encode_cv2(img(45, 61, 5), 80, restart=4, gray=True),
        "cv2-420-rst1-40x40": jc.encode_cv2(img(40, 40, 6), 85, "420", 1),
        "cv2-422-optimized-40x56": jc.encode_cv2(img(40, 56, 7), 70, "422", optimize=True),
        "pillow-444-q100-24x24": jc.encode_pillow(img(24, 24, 8), 100, 0),
        "cv2-444-1x1": jc.encode_cv2(img(1, 1, 9), 90, "444"),
    }
    base = good["cv2-420-rst1-40x40"]
    scan_start = entropy_sim.reference_scan(base).scan_start
    rst = base.index(b"\xff\xd2", scan_start)  # the third restart marker: out of order as RST5
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 255, 600, dtype=np.uint8).tobytes()  # no 0xFF: no markers
    corrupt = {
        "truncated": good["cv2-420-q90-48x64"][: len(good["cv2-420-q90-48x64"]) * 2 // 3],
        "restart-out-of-order": base[:rst] + b"\xff\xd5" + base[rst + 2:],
        "random-scan": base[:scan_start] + noise + b"\xff\xd9",
    }
    return good | corrupt


FILES = _files()
# Every file at full rate; four also with idle input and output backpressure (48/256 of cycles each).
STALLED = ("cv2-420-q90-48x64", "cv2-gray-rst4-45x61", "cv2-420-rst1-40x40", "truncated")
CASES = [(name, 0) for name in FILES] + [(name, 48) for name in STALLED]


@pytest.mark.parametrize(("name", "stalls"), CASES, ids=[f"{n}-stall{s}" for n, s in CASES])
def test_jpeg_entropy_decode(name, stalls, tmp_path):
    jpeg = FILES[name]
    scan = entropy_sim.reference_scan(jpeg)
    assert scan.status == 0
    status, blocks, _ = entropy_sim.reference_blocks(jpeg, scan)
    if name in ("truncated", "restart-out-of-order", "random-scan"):
        assert status == CORRUPT
    np.savez(tmp_path / "expected.npz", status=status, blocks=blocks)
    parameters = {"MAX_SCAN": entropy_sim.max_scan_beats(jpeg), "MAX_TABLES": entropy_sim.MAX_TABLE_WRITES,
                  "IDLE_256": stalls, "STALL_256": stalls, "CYCLE_LIMIT": 64 * len(jpeg) + 10000}
    run_cocotb("jpeg_entropy_tb", entropy_sim.SOURCES, Path(__file__), parameters, tmp_path / "sim",
               {"TB_EXPECTED": str(tmp_path / "expected.npz"), "TB_COEFS": str(tmp_path / "coefs.hex")},
               plusargs=entropy_sim.plusargs(jpeg, scan, tmp_path))
