"""cocotb testbench: hls/rtl/jpeg_decode_core.v equals its C model (hls/image/jpeg_decode_core.cpp) on real JPEGs.

The C model is the image CU's own entropy decoder and idct_islow behind the blackbox's streams
(and equals decode_block + idct_islow, which sim_tb/jpeg_entropy_decode checks at the coefficient
level). Each file of sim_tb/jpeg_entropy_decode/scan_files.py runs through the shared harness
(jpeg_entropy_tb.v built with CORE): table writes streamed after ap_start, the scan in 8-byte beats,
with and without random idle input and output backpressure; every sample of every block and the
status must equal the model's (on CORRUPT, the blocks both gave before it), within a cycle limit.
The pytest function at the bottom runs one simulation per case on Icarus Verilog.
"""

from __future__ import annotations

import json
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

UNIT = "jpeg_decode_core"
CORRUPT = 2
# The descriptor's latency and II are this file's cycles from ap_start to ap_done at full rate
# (tables, then the scan: a scan is data-dependent, so the figure is for this reference file).
REFERENCE_FILE = "cv2-420-q90-48x64"
_PERFORMANCE = json.loads((REPO / "hls" / "rtl" / f"{UNIT}.json").read_text())["rtl_performance"]


@cocotb.test()
async def core_decodes_like_its_c_model(dut):
    """Samples and status equal the C model's; no hang; the reference file's timing."""
    await RisingEdge(dut.finished)
    await ClockCycles(dut.clk, 2)
    expected = np.load(os.environ["TB_EXPECTED"])
    got = entropy_sim.read_result(Path(os.environ["TB_COEFS"]))
    assert got.status != entropy_sim.STATUS_TIMEOUT, "the cycle limit ran out: the core hangs"
    assert got.status == int(expected["status"]), (got.status, int(expected["status"]))
    assert dut.dut.ap_idle.value == 1
    decoded = entropy_sim.sample_blocks(got.beats)
    if got.status == CORRUPT:
        n = min(len(decoded), len(expected["blocks"]))
        np.testing.assert_array_equal(decoded[:n], expected["blocks"][:n])
    else:
        np.testing.assert_array_equal(decoded, expected["blocks"])
    if os.environ["TB_REFERENCE"] == "1":
        assert got.cycles == int(_PERFORMANCE["latency"]) == int(_PERFORMANCE["II"]), got.cycles
    dut._log.info("%d blocks, status %d; %d cycles of tables, %d from the first scan beat to the last row "
                  "for %d symbols", len(decoded), got.status, got.first_scan, got.scan_cycles, got.symbols)


FILES = scan_files.files()
STALLED = ("cv2-444-q75-33x31", "cv2-420-rst1-40x40", "random-scan")
CASES = [(name, 0) for name in FILES] + [(name, 48) for name in STALLED]


@pytest.mark.parametrize(("name", "stalls"), CASES, ids=[f"{n}-stall{s}" for n, s in CASES])
def test_jpeg_decode_core(name, stalls, tmp_path):
    jpeg = FILES[name]
    scan = entropy_sim.reference_scan(jpeg)
    assert scan.status == 0
    status, blocks = entropy_sim.core_model(jpeg, scan)
    assert (status == CORRUPT) == (name in scan_files.CORRUPT_FILES)
    np.savez(tmp_path / "expected.npz", status=status, blocks=blocks)
    parameters = {"MAX_SCAN": entropy_sim.max_scan_beats(jpeg), "MAX_TABLES": entropy_sim.MAX_TABLE_WRITES,
                  "IDLE_256": stalls, "STALL_256": stalls, "CYCLE_LIMIT": 64 * len(jpeg) + 20000}
    env = {"TB_EXPECTED": str(tmp_path / "expected.npz"), "TB_COEFS": str(tmp_path / "coefs.hex"),
           "TB_REFERENCE": str(int(name == REFERENCE_FILE and not stalls))}
    run_cocotb("jpeg_entropy_tb", entropy_sim.CORE_SOURCES, Path(__file__), parameters, tmp_path / "sim", env,
               plusargs=entropy_sim.plusargs(jpeg, scan, tmp_path, core=True), defines={"CORE": 1})
