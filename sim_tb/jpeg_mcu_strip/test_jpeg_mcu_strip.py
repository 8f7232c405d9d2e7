"""cocotb testbench: hls/rtl/jpeg_mcu_strip.v equals its C model (hls/image/jpeg_mcu_strip.cpp) on real JPEGs.

Input: the sample rows jpeg_decode_core's C model gives for a file (strip_model.chain; for a
corrupt scan the decoded blocks, then its zero rows); expected: the strip C model's column beats,
which tests/sim_tb/test_jpeg_mcu_strip_model.py holds to today's frame-store path
(decode_scan + emit_upsample_columns). Files: the decode-core testbench's (4:2:0, 4:4:4, 4:2:2,
4:4:0, grayscale, restarts, 1x1, odd sizes, three corrupt scans) and small decode-corpus files of
every sampling at the edge sizes, one after another with random idle input and backpressure,
every beat compared, a frame exactly MAX_WIDTH wide among them. First the reference file at full
rate: its cycles from ap_start to ap_done are the descriptor's latency and II. Last, random
samples at sampling factors no encoder here writes, against the strip's C model alone. The strips are built MAX_WIDTH = 512
wide here (the layout does not depend on it; hls/rtl/README.md gives the 8192-wide unit's
resources).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import cocotb
import numpy as np
from cocotb.utils import get_sim_time
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotbext.axi import AxiStreamFrame

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "fpga_host"))

import jpeg_corpus as jc  # noqa: E402  (the image-CU tests' corpus)

from sim_tb.cocotb_run import random_pauses, run_testbench  # noqa: E402
from sim_tb.jpeg_entropy_decode import scan_files  # noqa: E402
from sim_tb.jpeg_mcu_strip import strip_model  # noqa: E402
from sim_tb.stream_harness import StreamHarness  # noqa: E402

UNIT = "jpeg_mcu_strip"
MAX_WIDTH = 512
REFERENCE_FILE = "cv2-420-q90-48x64"
# (width, height, (h, v) per component) of the synthetic frames.
SYNTHETIC = [(37, 29, [(1, 2), (2, 1), (1, 1)]), (21, 35, [(1, 1), (2, 2), (1, 1)]), (2, 3, [(2, 1), (1, 2), (1, 1)]),
             (50, 17, [(2, 2), (2, 2), (2, 1)]), (9, 40, [(1, 2), (1, 1), (1, 2)])]
_PERFORMANCE = json.loads((REPO / "hls" / "rtl" / f"{UNIT}.json").read_text())["rtl_performance"]
CORPUS_SIZES = ("-17x9", "-3x2", "-33x31")


def files() -> dict[str, bytes]:
    chosen = dict(scan_files.files())
    for case in jc.decode_corpus():
        if case.name.endswith(CORPUS_SIZES):
            chosen[case.name] = case.make()
    # Exactly MAX_WIDTH wide, 4:2:0 over an MCU row and a part.
    chosen["cv2-420-max-width"] = jc.encode_cv2(jc.natural_image(21, MAX_WIDTH, 11), 85, "420")
    return chosen


class Harness(StreamHarness):
    async def run(self, args: strip_model.StripArgs, rows: np.ndarray) -> np.ndarray:
        dut = self.dut
        dut.width.value, dut.height.value, dut.sampling.value = args.width, args.height, args.sampling
        dut.n_components.value, dut.mode.value = args.n_components, args.mode
        await self.start()
        start = get_sim_time("ns")
        await self.source.send(AxiStreamFrame(np.ascontiguousarray(rows, np.uint8).tobytes()))
        out = []
        for _ in range(args.beats):
            out.append(bytes((await self.sink.recv()).tdata))
        await self.done()
        self.cycles = int(get_sim_time("ns") - start) // 4 + 1
        return np.frombuffer(b"".join(out), np.uint32).reshape(-1, 3)


@cocotb.test()
async def strips_bit_exact_with_idle_and_backpressure(dut):
    rng = np.random.default_rng(40)
    harness = Harness(dut)
    await harness.reset()
    chosen = files()
    args = strip_model.strip_args(chosen[REFERENCE_FILE])
    _, rows, want = strip_model.chain(chosen[REFERENCE_FILE], args)
    np.testing.assert_array_equal(await harness.run(args, rows), want)
    dut._log.info("%s at full rate: %d cycles", REFERENCE_FILE, harness.cycles)
    assert harness.cycles == int(_PERFORMANCE["latency"]) == int(_PERFORMANCE["II"]), harness.cycles
    stalls = float(os.environ["TB_STALLS"])
    harness.source.set_pause_generator(random_pauses(rng, stalls))
    harness.sink.set_pause_generator(random_pauses(rng, stalls))
    for name, jpeg in chosen.items():
        args = strip_model.strip_args(jpeg)
        status, rows, want = strip_model.chain(jpeg, args)
        assert len(rows) == args.rows and len(want) == args.beats, name
        # A hang fails: a cycle limit of 8 per row and beat (30 % stalls each way need about 1.5).
        got = await with_timeout(cocotb.start_soon(harness.run(args, rows)), 4 * 8 * (len(rows) + args.beats) + 400,
                                 "ns")
        bad = np.flatnonzero((got != want).any(axis=1))
        assert bad.size == 0, f"{name}: {bad.size} of {len(want)} beats differ; first {bad[0]}: {got[bad[0]]} != {want[bad[0]]}"
        dut._log.info("%s: %d rows in, %d beats out, status %d", name, len(rows), len(got), status)
    # Random samples at sampling factors no encoder here writes, odd sizes.
    for k, (width, height, factors) in enumerate(SYNTHETIC):
        args, rows = strip_model.synthetic(width, height, factors, k)
        got = await with_timeout(cocotb.start_soon(harness.run(args, rows)), 4 * 8 * (len(rows) + args.beats) + 400,
                                 "ns")
        np.testing.assert_array_equal(got, strip_model.strip_only(args, rows), err_msg=str(factors))
    assert dut.ap_idle.value == 1 and dut.s_axis_tready.value == 0


@cocotb.test()
async def reset_in_the_middle_of_a_frame(dut):
    """A reset mid-frame leaves the unit idle; the next frame is exact."""
    harness = Harness(dut)
    await harness.reset()
    args, rows = strip_model.synthetic(40, 33, [(2, 2), (1, 1), (1, 1)], 7)
    dut.width.value, dut.height.value, dut.sampling.value = args.width, args.height, args.sampling
    dut.n_components.value, dut.mode.value = args.n_components, args.mode
    dut.ap_start.value = 1
    await RisingEdge(dut.ap_clk)
    dut.ap_start.value = 0
    await harness.source.send(AxiStreamFrame(rows[: len(rows) // 2].tobytes()))
    await harness.source.wait()
    await ClockCycles(dut.ap_clk, 20)
    await harness.reset()
    harness.sink.clear()
    assert dut.ap_idle.value == 1 and dut.m_axis_tvalid.value == 0
    np.testing.assert_array_equal(await harness.run(args, rows), strip_model.strip_only(args, rows))


def test_jpeg_mcu_strip(tmp_path):
    strip_model.strip_args(b"")  # the C model is built once here, not in the simulator's process
    run_testbench(UNIT, {"MAX_WIDTH": MAX_WIDTH}, tmp_path / "sim", {"TB_STALLS": "0.3"})
