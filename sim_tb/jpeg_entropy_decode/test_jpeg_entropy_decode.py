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

from sim_tb.cocotb_run import run_cocotb  # noqa: E402
from sim_tb.jpeg_entropy_decode import entropy_sim, scan_files  # noqa: E402

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


FILES = scan_files.files()
# Every file at full rate; four also with idle input and output backpressure (48/256 of cycles each).
STALLED = ("cv2-420-q90-48x64", "cv2-gray-rst4-45x61", "cv2-420-rst1-40x40", "truncated")
CASES = [(name, 0) for name in FILES] + [(name, 48) for name in STALLED]


@pytest.mark.parametrize(("name", "stalls"), CASES, ids=[f"{n}-stall{s}" for n, s in CASES])
def test_jpeg_entropy_decode(name, stalls, tmp_path):
    jpeg = FILES[name]
    scan = entropy_sim.reference_scan(jpeg)
    assert scan.status == 0
    status, blocks, _ = entropy_sim.reference_blocks(jpeg, scan)
    if name in scan_files.CORRUPT_FILES:
        assert status == CORRUPT
    np.savez(tmp_path / "expected.npz", status=status, blocks=blocks)
    parameters = {"MAX_SCAN": entropy_sim.max_scan_beats(jpeg), "MAX_TABLES": entropy_sim.MAX_TABLE_WRITES,
                  "IDLE_256": stalls, "STALL_256": stalls, "CYCLE_LIMIT": 64 * len(jpeg) + 10000}
    run_cocotb("jpeg_entropy_tb", entropy_sim.SOURCES, Path(__file__), parameters, tmp_path / "sim",
               {"TB_EXPECTED": str(tmp_path / "expected.npz"), "TB_COEFS": str(tmp_path / "coefs.hex")},
               plusargs=entropy_sim.plusargs(jpeg, scan, tmp_path))
