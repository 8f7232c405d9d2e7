"""cocotb testbench at a Vitis HLS kernel's AXI boundary, for any kernel RTL with that interface.

Each m_axi bundle gets a cocotbext-axi AxiRam; an AxiLiteMaster on s_axi_control writes every
argument (pointers as 64-bit addresses of their buffers), sets ap_start and polls ap_done, as XRT
does. Each run of the case (written by hls_kernel.py: argument list, scalar values, input
buffers, expected outputs, the reference named by the caller) then compares the bytes the kernel
left in its output buffers. Also checked: ap_idle before and after a run, ap_done cleared by its
read, and the ap_done interrupt (enabled for the first run, acknowledged by writing the status).
Every channel of every AxiRam stalls at random (a fifth of the cycles), as a shared memory does.
"""

from __future__ import annotations

import json
import logging
import os
import random
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

CTRL, GIE, IER, ISR = 0x00, 0x04, 0x08, 0x0C
AP_START, AP_DONE, AP_IDLE = 0x1, 0x2, 0x4
BUFFER_ALIGN = 4096
POLL_CYCLES = 16
STALL_PROBABILITY = 0.2
TIMEOUT_CYCLES = 50_000_000


def axi_bus(dut, prefix: str) -> AxiBus:
    """The bundle's AXI bus; lock signals wider than AXI4's one bit (Vitis HLS emits two) are
    left out: the RAM does not use them."""
    bus = AxiBus.from_prefix(dut, prefix)
    for channel, name in ((bus.write.aw, "awlock"), (bus.read.ar, "arlock")):
        if hasattr(channel, name) and len(getattr(channel, name)) != 1:
            delattr(channel, name)
    return bus


def layout(case: dict) -> dict[str, tuple[str, int, int]]:
    """name -> (bundle, address, size) for every pointer: 4 KiB-aligned, bundle by bundle."""
    sizes: dict[str, int] = {}
    for run in case["runs"]:
        for name, size in run["buffers"].items():
            sizes[name] = max(sizes.get(name, 0), size)
    places, next_free = {}, {}
    for arg in case["args"]:
        if arg["bundle"] is None:
            continue
        address = next_free.get(arg["bundle"], BUFFER_ALIGN)
        places[arg["name"]] = (arg["bundle"], address, sizes[arg["name"]])
        next_free[arg["bundle"]] = address + -(-sizes[arg["name"]] // BUFFER_ALIGN) * BUFFER_ALIGN
    return places


def random_pauses(rng: random.Random):
    while True:
        yield rng.random() < STALL_PROBABILITY


def stall_channels(ram: AxiRam, rng: random.Random) -> None:
    for channel in (ram.write_if.aw_channel, ram.write_if.w_channel, ram.write_if.b_channel,
                    ram.read_if.ar_channel, ram.read_if.r_channel):
        channel.set_pause_generator(random_pauses(rng))


async def wait_done(control: AxiLiteMaster, dut) -> None:
    for _ in range(TIMEOUT_CYCLES // POLL_CYCLES):
        if await control.read_dword(CTRL) & AP_DONE:
            return
        await ClockCycles(dut.ap_clk, POLL_CYCLES)
    raise AssertionError("ap_done never rose")


@cocotb.test()
async def runs_match_reference(dut):
    """Every run's output buffers equal the reference's bytes."""
    case_dir = Path(os.environ["TB_CASE"])
    case = json.loads((case_dir / "case.json").read_text())
    places = layout(case)
    ram_size = {b: max(a + s for bb, a, s in places.values() if bb == b) + BUFFER_ALIGN for b, _, _ in places.values()}
    cocotb.start_soon(Clock(dut.ap_clk, 4, unit="ns").start())
    rams = {b: AxiRam(axi_bus(dut, f"m_axi_{b}"), dut.ap_clk, dut.ap_rst_n, reset_active_level=False, size=size)
            for b, size in ram_size.items()}
    rng = random.Random(16)
    for ram in rams.values():
        stall_channels(ram, rng)
    control = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi_control"), dut.ap_clk, dut.ap_rst_n,
                            reset_active_level=False)
    # Their per-transaction INFO lines would cost more simulation time than the kernel itself.
    for prefix in ["s_axi_control", *(f"m_axi_{b}" for b in rams)]:
        logging.getLogger(f"cocotb.{dut._name}.{prefix}").setLevel(logging.WARNING)
    dut.ap_rst_n.value = 0
    await ClockCycles(dut.ap_clk, 8)
    dut.ap_rst_n.value = 1
    await ClockCycles(dut.ap_clk, 4)

    offsets = case["offsets"]
    for k, run in enumerate(case["runs"]):
        assert await control.read_dword(CTRL) & AP_IDLE, "not idle before the run"
        for name, (bundle, address, _) in places.items():
            if name in run["buffers"]:
                rams[bundle].write(address, (case_dir / f"run{k}_in_{name}.bin").read_bytes())
            await control.write_dword(offsets[name], address & 0xFFFFFFFF)
            await control.write_dword(offsets[name] + 4, address >> 32)
        for name, value in run["scalars"].items():
            await control.write_dword(offsets[name], value & 0xFFFFFFFF)
        interrupting = k == 0
        await control.write_dword(GIE, int(interrupting))
        await control.write_dword(IER, int(interrupting))
        await control.write_dword(CTRL, AP_START)
        await wait_done(control, dut)
        assert not await control.read_dword(CTRL) & AP_DONE, "ap_done not cleared by its read"
        if interrupting:
            assert dut.interrupt.value == 1 and await control.read_dword(ISR) & 1
            await control.write_dword(ISR, 1)
            await RisingEdge(dut.ap_clk)
            assert dut.interrupt.value == 0
        for name in run["expected"]:
            bundle, address, _ = places[name]
            want = (case_dir / f"run{k}_expected_{name}.bin").read_bytes()
            got = rams[bundle].read(address, len(want))
            if got != want:
                first = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
                raise AssertionError(f"run {k}: {name} differs from byte {first} "
                                     f"({sum(g != w for g, w in zip(got, want))} of {len(want)} bytes)")
        dut._log.info("run %d: %s match the reference", k, ", ".join(run["expected"]))
    assert await control.read_dword(CTRL) & AP_IDLE
