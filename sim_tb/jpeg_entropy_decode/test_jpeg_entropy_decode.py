"""cocotb testbench: hls/rtl/jpeg_entropy_decode.v decodes real JPEG scans exactly as the image CU's C++.

Reference: the CU's own header parser and entropy decoder (jpeg_markers.h, jpeg_huffman.h,
decode_scan's MCU and restart loop) behind entropy_ref.cpp. The files of scan_files.py run one
after another through the harness jpeg_entropy_tb.v on one unit (tables written through the
table port before each scan, the scan bytes in 8-byte beats, with random idle cycles on the input
and backpressure on the output, or neither); every coefficient block and every status must equal
the reference's, within the harness's cycle limit. Corrupt scans (truncated, a restart marker out
of order, random bytes) must end CORRUPT, and the next scan must decode as if alone.
The pytest function at the bottom runs one simulation per stall setting on Icarus Verilog.
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

CORRUPT = entropy_sim.CORRUPT


@cocotb.test()
async def scans_decode_like_the_cu(dut):
    """Every scan's beats, as blocks, and its status equal the reference's; no hang."""
    await RisingEdge(dut.finished)
    await ClockCycles(dut.clk, 2)
    expected = np.load(os.environ["TB_EXPECTED"])
    results = entropy_sim.read_results(Path(os.environ["TB_COEFS"]))
    for name, got, decoded in entropy_sim.matched_scans(expected, results, entropy_sim.blocks):
        dut._log.info("%s: %d blocks, status %d, %d cycles for %d symbols (%.3f a symbol)", name, len(decoded),
                      got.status, got.last_beat, got.symbols, got.last_beat / max(got.symbols, 1))
    assert dut.dut.ap_idle.value == 1


FILES = scan_files.files()


@pytest.mark.parametrize("stalls", [0, 48], ids=["full-rate", "stalls"])
def test_jpeg_entropy_decode(stalls, tmp_path):
    """Every file of scan_files, one after another on one unit, at full rate or with 48/256 of the
    cycles idle on the input and stalled on the output."""
    jobs, expected = [], {"names": np.array(list(FILES))}
    for i, (name, jpeg) in enumerate(FILES.items()):
        scan = entropy_sim.reference_scan(jpeg)
        assert scan.status == 0
        status, blocks, _ = entropy_sim.reference_blocks(jpeg, scan)
        assert (status == CORRUPT) == (name in scan_files.CORRUPT_FILES), name
        expected |= {f"status{i}": status, f"blocks{i}": blocks}
        jobs.append((jpeg, scan))
    np.savez(tmp_path / "expected.npz", **expected)
    parameters = entropy_sim.harness_sizes(jobs) | {
        "IDLE_256": stalls, "STALL_256": stalls, "CYCLE_LIMIT": 64 * max(len(j) for j, _ in jobs) + 10000}
    run_cocotb("jpeg_entropy_tb", entropy_sim.SOURCES, Path(__file__), parameters, tmp_path / "sim",
               {"TB_EXPECTED": str(tmp_path / "expected.npz"), "TB_COEFS": str(tmp_path / "coefs.hex")},
               plusargs=entropy_sim.plusargs(jobs, tmp_path))
