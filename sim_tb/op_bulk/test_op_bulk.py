"""cocotb test run by sim_tb/op_bulk/op_bulk.py: the RTL operator's results against its reference.

The harness (op_bulk_tb.v) streams every operand vector through the unit by itself; this test
waits for the last result, then compares the result file with the reference (a .npy of expected
bit patterns that the unit's testbench computed with NumPy, named in each testbench). On the
operations the harness runs without idle cycles and stalls (CALM) it also checks the blackbox
descriptor's timing: the first result LATENCY cycles after its ap_start, then one per II cycles.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from sim_tb.op_bulk.op_bulk import read_hex  # noqa: E402


@cocotb.test()
async def operator_stream(dut):
    """Every result bit-exact with the reference; the unit idle afterwards; the calm prefix's timing."""
    await RisingEdge(dut.finished)
    await ClockCycles(dut.clk, 2)  # $writememh has run; the pipeline has drained
    expected = np.load(os.environ["TB_EXPECTED"])
    got = np.stack(read_hex(Path(os.environ["TB_RESULTS"]), expected.shape[1]), axis=1)
    bad = np.flatnonzero((got != expected).any(axis=1))
    assert bad.size == 0, (
        f"{bad.size} of {len(expected)} results differ; first at {bad[0]}: "
        f"got {[hex(v) for v in got[bad[0]]]} want {[hex(v) for v in expected[bad[0]]]}"
    )
    assert dut.dut.unit.ap_idle.value == 1
    calm = int(os.environ["TB_CALM"])
    dut._log.info("%d results bit-exact (idle %s/256, stall %s/256 after the first %d)", len(expected),
                  os.environ["TB_IDLE_256"], os.environ["TB_STALL_256"], calm)
    if calm:
        latency, ii = int(os.environ["TB_LATENCY"]), int(os.environ["TB_II"])
        assert int(dut.first_latency.value) == latency, int(dut.first_latency.value)
        assert int(dut.calm_span.value) == latency + ii * (calm - 1), int(dut.calm_span.value)
