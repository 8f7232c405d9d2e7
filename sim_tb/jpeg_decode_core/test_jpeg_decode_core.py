"""cocotb testbench: hls/rtl/jpeg_decode_core.v equals its C model (hls/image/jpeg_decode_core.cpp) on real JPEGs.

The C model is the image CU's own entropy decoder and idct_islow behind the blackbox's streams
(and equals decode_block + idct_islow, which sim_tb/jpeg_entropy_decode checks at the coefficient
level). Seven files of sim_tb/jpeg_entropy_decode/scan_files.py run one after another on one core
through the shared harness (jpeg_entropy_tb.v built with CORE): table writes streamed after
ap_start, the scan in 8-byte beats, with and without random idle input and output backpressure;
every sample of every block and every status must equal the model's (on CORRUPT, every block of
the scan still leaves: the blocks both decoded before it, then zero rows), within a cycle limit,
and a scan after a CORRUPT one must decode as if alone.
The pytest function at the bottom runs one simulation per stall setting on Icarus Verilog.
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
CORRUPT = entropy_sim.CORRUPT
# The descriptor's latency and II are this file's cycles from ap_start to ap_done at full rate
# (tables, then the scan: a scan is data-dependent, so the figure is for this reference file).
REFERENCE_FILE = "cv2-420-q90-48x64"
_PERFORMANCE = json.loads((REPO / "hls" / "rtl" / f"{UNIT}.json").read_text())["rtl_performance"]


@cocotb.test()
async def core_decodes_like_its_c_model(dut):
    """Every scan's samples and status equal the C model's; no hang; the reference file's timing."""
    await RisingEdge(dut.finished)
    await ClockCycles(dut.clk, 2)
    expected = np.load(os.environ["TB_EXPECTED"])
    results = entropy_sim.read_results(Path(os.environ["TB_COEFS"]))
    for name, got, decoded in entropy_sim.matched_scans(expected, results, entropy_sim.sample_blocks, padded=True):
        if name == REFERENCE_FILE and os.environ["TB_STALLS"] == "0":
            assert got.cycles == int(_PERFORMANCE["latency"]) == int(_PERFORMANCE["II"]), got.cycles
        dut._log.info("%s: %d blocks, status %d; %d cycles of tables, %d from the first scan beat to the last "
                      "row for %d symbols", name, len(decoded), got.status, got.first_scan, got.scan_cycles,
                      got.symbols)
    assert dut.dut.ap_idle.value == 1


# The core's own parts (tables streamed in, de-zigzag, dequantisation, IDCT, the drain after a
# CORRUPT scan) on a subset: the entropy decoder's breadth is sim_tb/jpeg_entropy_decode's.
CORE_FILES = ("cv2-420-q90-48x64", "truncated", "cv2-444-q75-33x31", "cv2-gray-rst4-45x61", "random-scan",
              "cv2-444-1x1", "pillow-444-q100-24x24")
FILES = {name: jpeg for name, jpeg in scan_files.files().items() if name in CORE_FILES}


@pytest.mark.parametrize("stalls", [0, 48], ids=["full-rate", "stalls"])
def test_jpeg_decode_core(stalls, tmp_path):
    """Every file of scan_files, one after another on one core, at full rate or with 48/256 of the
    cycles idle on the input and stalled on the output."""
    jobs, expected = [], {"names": np.array(list(FILES))}
    for i, (name, jpeg) in enumerate(FILES.items()):
        scan = entropy_sim.reference_scan(jpeg)
        assert scan.status == 0
        status, blocks = entropy_sim.core_model(jpeg, scan)
        assert (status == CORRUPT) == (name in scan_files.CORRUPT_FILES), name
        expected |= {f"status{i}": status, f"blocks{i}": blocks}
        jobs.append((jpeg, scan))
    np.savez(tmp_path / "expected.npz", **expected)
    parameters = entropy_sim.harness_sizes(jobs) | {
        "IDLE_256": stalls, "STALL_256": stalls, "CYCLE_LIMIT": 64 * max(len(j) for j, _ in jobs) + 20000}
    env = {"TB_EXPECTED": str(tmp_path / "expected.npz"), "TB_COEFS": str(tmp_path / "coefs.hex"),
           "TB_STALLS": str(stalls)}
    run_cocotb("jpeg_entropy_tb", entropy_sim.CORE_SOURCES, Path(__file__), parameters, tmp_path / "sim", env,
               plusargs=entropy_sim.plusargs(jobs, tmp_path, core=True), defines={"CORE": 1})
