"""What the cocotb testbenches of the streaming RTL units share: the clock, an AXI-Stream source on
`s_axis` and sink on `m_axis`, the synchronous reset, and the ap_ctrl_chain start and done."""

from __future__ import annotations

import logging

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamSink, AxiStreamSource

CLOCK_NS = 4


class StreamHarness:
    def __init__(self, dut):
        self.dut = dut
        cocotb.start_soon(Clock(dut.ap_clk, CLOCK_NS, unit="ns").start())
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.ap_clk, dut.ap_rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.ap_clk, dut.ap_rst)
        # Their per-beat INFO lines would cost more simulation time than the design itself.
        self.source.log.setLevel(logging.WARNING)
        self.sink.log.setLevel(logging.WARNING)
        dut.ap_start.value = 0

    async def reset(self) -> None:
        self.dut.ap_rst.value = 1
        await ClockCycles(self.dut.ap_clk, 3)
        self.dut.ap_rst.value = 0
        await RisingEdge(self.dut.ap_clk)

    async def start(self) -> None:
        """ap_start held until ap_ready (the unit has latched its arguments)."""
        self.dut.ap_start.value = 1
        await RisingEdge(self.dut.ap_clk)
        while self.dut.ap_ready.value != 1:
            await RisingEdge(self.dut.ap_clk)
        self.dut.ap_start.value = 0

    async def done(self) -> None:
        while self.dut.ap_done.value != 1:
            await RisingEdge(self.dut.ap_clk)
