"""cocotb testbench: hls/rtl/jpeg_bit_reader.v de-stuffs scan bytes and reports markers as T.81 says.

Reference: a byte-at-a-time model of the entropy-coded segment (`expected_beats`): a byte other
than 0xFF is data, 0xFF 0x00 is a data 0xFF, 0xFF fill bytes before a marker are dropped, 0xFF and
a non-zero byte is a marker, the end of the input (or a lone 0xFF as its last byte) is the end.
Random streams heavy in 0xFF, stuffing, fill bytes and markers, cut into input beats of random
byte counts, go in with random idle cycles and output backpressure (and without, where the
output must reach 4 bytes a cycle); the data bytes and the marker/end sequence must equal the
model's, and `clear` must drop a stream left in the middle.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sim_tb.cocotb_run import RTL, run_cocotb  # noqa: E402

UNIT = "jpeg_bit_reader"


def expected_beats(data: bytes) -> list[tuple[str, bytes | int]]:
    """('data', bytes) runs merged, ('marker', code), and the final ('end', 0)."""
    out: list[tuple[str, bytes | int]] = []
    run = bytearray()
    i = 0
    while i < len(data):
        b = data[i]
        if b != 0xFF:
            run.append(b)
            i += 1
        elif i + 1 < len(data) and data[i + 1] == 0x00:
            run.append(0xFF)
            i += 2
        elif i + 1 < len(data) and data[i + 1] == 0xFF:
            i += 1  # fill byte
        elif i + 1 < len(data):
            if run:
                out.append(("data", bytes(run)))
                run = bytearray()
            out.append(("marker", data[i + 1]))
            i += 2
        else:
            break  # a lone 0xFF ends the input
    if run:
        out.append(("data", bytes(run)))
    out.append(("end", 0))
    return out


def merge(beats: list[tuple[str, bytes | int]]) -> list[tuple[str, bytes | int]]:
    merged: list[tuple[str, bytes | int]] = []
    for kind, value in beats:
        if kind == "data" and merged and merged[-1][0] == "data":
            merged[-1] = ("data", merged[-1][1] + value)
        else:
            merged.append((kind, value))
    return merged


def random_stream(rng: np.random.Generator, n: int) -> bytes:
    """Scan-like bytes: mostly data, many 0xFF 0x00 pairs, fill bytes, RSTn and other markers."""
    out = bytearray()
    while len(out) < n:
        r = rng.random()
        if r < 0.70:
            out.append(int(rng.integers(0, 255)))
        elif r < 0.85:
            out += b"\xff\x00"
        elif r < 0.92:
            out += b"\xff" * int(rng.integers(1, 4)) + bytes([0xD0 + int(rng.integers(0, 8))])
        else:
            out += bytes([0xFF, int(rng.integers(1, 0xFF))])
    return bytes(out)


async def drive(dut, data: bytes, rng: np.random.Generator, idle: float, stall: float, limit: int):
    """Feeds data in beats of random byte counts; collects output beats up to the end beat."""
    chunks = []
    at = 0
    while at < len(data):
        n = int(rng.integers(1, 9))
        chunks.append(data[at:at + n])
        at += n
    got: list[tuple[str, bytes | int]] = []
    sent = 0
    data_cycles = 0
    for cycle in range(limit):
        if sent < len(chunks) and rng.random() >= idle:
            chunk = chunks[sent]
            word = int.from_bytes(chunk, "little") | len(chunk) << 64 | int(sent == len(chunks) - 1) << 72
            dut.s_axis_tdata.value = word
            dut.s_axis_tvalid.value = 1
        else:
            dut.s_axis_tvalid.value = 0
        dut.m_axis_tready.value = int(rng.random() >= stall)
        await RisingEdge(dut.clk)
        if dut.s_axis_tvalid.value == 1 and dut.s_axis_tready.value == 1:
            sent += 1
        if dut.m_axis_tvalid.value == 1 and dut.m_axis_tready.value == 1:
            beat = int(dut.m_axis_tdata.value)
            count = beat >> 32 & 7
            if beat >> 36 & 1:
                got.append(("end", 0))
                return got, data_cycles
            if beat >> 35 & 1:
                got.append(("marker", beat & 0xFF))
            else:
                assert 1 <= count <= 4, count
                got.append(("data", (beat & 0xFFFFFFFF).to_bytes(4, "big")[:count]))
                data_cycles += 1
    raise AssertionError(f"no end beat within {limit} cycles")


@cocotb.test()
async def destuffs_like_the_model(dut):
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    rng = np.random.default_rng(int(os.environ.get("TB_SEED", "1")))
    dut.rst.value = 1
    dut.clear.value = 0
    dut.s_axis_tvalid.value = 0
    dut.m_axis_tready.value = 0
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    for trial, (idle, stall) in enumerate([(0.0, 0.0), (0.3, 0.3), (0.1, 0.5), (0.0, 0.0)]):
        data = random_stream(rng, 300) if trial < 3 else bytes(rng.integers(0, 255, 400, dtype=np.uint8))
        if trial == 1:
            data += b"\xff"  # a lone 0xFF at the very end
        got, data_cycles = await drive(dut, data, rng, idle, stall, 20 * len(data) + 100)
        assert merge(got) == expected_beats(data), trial
        if trial == 3:  # no 0xFF at all, no stalls: four bytes in nearly every output beat
            assert data_cycles <= len(data) // 4 + len(data) // 32 + 4, data_cycles
        dut.s_axis_tvalid.value = 0
        # A stream left in the middle, then clear: nothing of it may come out afterwards.
        dut.s_axis_tdata.value = 0x08_1122334455667788
        dut.s_axis_tvalid.value = 1
        dut.m_axis_tready.value = 0
        await ClockCycles(dut.clk, 3)
        dut.s_axis_tvalid.value = 0
        dut.clear.value = 1
        await RisingEdge(dut.clk)
        dut.clear.value = 0
        await RisingEdge(dut.clk)
        assert dut.m_axis_tvalid.value == 0


def test_jpeg_bit_reader(tmp_path):
    run_cocotb(UNIT, [RTL / f"{UNIT}.v"], Path(__file__), {}, tmp_path / "sim", {"TB_SEED": "1"})
