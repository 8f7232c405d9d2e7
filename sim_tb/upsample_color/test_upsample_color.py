"""cocotb testbench: hls/rtl/upsample_color.v is the image CU's upsampling + colour unit, bit for bit.

Reference: the unit's C model (hls/image/upsample_color.cpp, what the image CU runs in C
simulation; tests/fpga_host/test_image_decode.py holds it to cv2.imdecode on the JPEG corpus)
behind upsample_ref.cpp through ctypes. Data: JPEGs of the bench corpus decoded by OpenCV, turned
into Y, Cb, Cr planes at each sampling (4:2:0, 4:2:2, 4:4:0, 4:4:4, mixed), grayscale and RGB,
sizes 1x1 up to 96x80 with odd widths and heights and components 1 and 2 samples wide (libjpeg's
box replication); column beats built as the kernel's feed builds them (upsample_feed.h: nearest
and next-nearest plane rows), with random idle cycles on the input and backpressure on the
output. A plain-Verilog harness then streams frames at full rate and counts cycles (the figures
in hls/rtl/README.md: `python -m sim_tb.upsample_color.test_upsample_color --rate 1280x720`).
"""

from __future__ import annotations

import ctypes
import json
import re
import subprocess
import sys
from pathlib import Path

import cocotb
import cv2
import numpy as np
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamFrame

from sim_tb.c_model import HLS, build_shared_library
from sim_tb.cocotb_run import RTL, random_pauses, run_testbench
from sim_tb.stream_harness import StreamHarness

UNIT = "upsample_color"
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GRAY, RGB = 1 << 6, 1 << 7
LATENCY_CYCLES = int(json.loads((REPO / "hls" / "rtl" / f"{UNIT}.json").read_text())["rtl_performance"]["latency"])
# Sampling name -> the mode word's component bits (bit 2ci: h2, bit 2ci+1: v2).
SAMPLINGS = {"420": 0b111100, "422": 0b010100, "440": 0b101000, "444": 0, "mixed": 0b011100, "gray": GRAY,
             "rgb": RGB}
# (height, width, sampling): the edges of libjpeg's filters (1 and 2 wide, odd sizes) and whole
# frames.
CASES = [(1, 1, "420"), (2, 3, "420"), (3, 4, "422"), (5, 2, "440"), (4, 5, "420"), (7, 9, "mixed"),
         (3, 6, "444"), (6, 7, "gray"), (5, 5, "rgb"), (17, 33, "420"), (16, 31, "422"), (13, 20, "440"),
         (48, 64, "420"), (80, 96, "422"), (45, 37, "420")]


def reference_library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build_shared_library(
        [HERE / "upsample_ref.cpp", HLS / "image" / "upsample_color.cpp"],
        [*(HLS / "image").glob("*.h"), *(HLS / "common").glob("*.h")],
        REPO / "build" / "sim_tb" / UNIT, "upsample_ref")))
    lib.upsample_ref.argtypes = [ctypes.c_void_p] + [ctypes.c_uint32] * 3 + [ctypes.c_void_p]
    return lib


def c_model(beats: np.ndarray, width: int, height: int, mode: int) -> np.ndarray:
    """(height * ceil(width / 2),) uint64 pixel pairs of the C model."""
    beats = np.ascontiguousarray(beats, np.uint32)
    pairs = np.zeros(len(beats), np.uint64)
    reference_library().upsample_ref(beats.ctypes.data, width, height, mode, pairs.ctypes.data)
    return pairs


def corpus_photo(height: int, width: int, seed: int) -> np.ndarray:
    """A bench-corpus JPEG of that size decoded by OpenCV (RGB)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from atoll.bench.corpus import jpeg_bytes  # the repository's test JPEGs

    bgr = cv2.imdecode(np.frombuffer(jpeg_bytes(width, height, seed=seed), np.uint8), cv2.IMREAD_COLOR)
    return bgr[:, :, ::-1]


def component_planes(rgb: np.ndarray, mode: int) -> list[np.ndarray]:
    """Y, Cb, Cr planes (or R, G, B for RGB; Y alone for gray), each subsampled as `mode` says
    (a 2x2 or 2x1 box average, as an encoder would)."""
    ycrcb = cv2.cvtColor(np.ascontiguousarray(rgb[:, :, ::-1]), cv2.COLOR_BGR2YCrCb)
    full = [rgb[:, :, k] for k in range(3)] if mode & RGB else [ycrcb[:, :, 0], ycrcb[:, :, 2], ycrcb[:, :, 1]]
    planes = []
    for ci, plane in enumerate(full[:1] if mode & GRAY else full):
        plane = plane.astype(np.float64)
        if (mode >> (2 * ci + 1)) & 1:
            plane = np.pad(plane, ((0, plane.shape[0] % 2), (0, 0)), mode="edge")
            plane = (plane[0::2] + plane[1::2]) / 2
        if (mode >> (2 * ci)) & 1:
            plane = np.pad(plane, ((0, 0), (0, plane.shape[1] % 2)), mode="edge")
            plane = (plane[:, 0::2] + plane[:, 1::2]) / 2
        planes.append(np.round(plane).astype(np.uint8))
    return planes


def column_beats(planes: list[np.ndarray], width: int, height: int, mode: int, rng) -> np.ndarray:
    """(height * P, 3) uint32 column beats as upsample_feed.h builds them; bytes the unit must not
    read (a full-width row's padding column, `far` of a component without v2, absent components)
    are random."""
    pairs = (width + 1) // 2
    beats = rng.integers(0, 2**32, (height, pairs, 3), dtype=np.uint64).astype(np.uint32)
    p = np.arange(pairs)
    for ci, plane in enumerate(planes):
        h2, v2 = (mode >> (2 * ci)) & 1, (mode >> (2 * ci + 1)) & 1
        padded = np.concatenate([plane, rng.integers(0, 256, (plane.shape[0], 1), dtype=np.uint8)], axis=1)
        a, b = (p, p) if h2 else (2 * p, 2 * p + 1)
        for y in range(height):
            if v2:
                i = y >> 1
                j = min(i + 1, plane.shape[0] - 1) if y & 1 else max(i - 1, 0)
                near, far = padded[i], padded[j]
            else:
                near, far = padded[y], rng.integers(0, 256, padded.shape[1], dtype=np.uint8)
            beats[y, :, ci] = (near[a].astype(np.uint32) | near[b].astype(np.uint32) << 8
                               | far[a].astype(np.uint32) << 16 | far[b].astype(np.uint32) << 24)
    return beats.reshape(-1, 3)


def case_data(case, seed: int):
    height, width, sampling = case
    mode = SAMPLINGS[sampling]
    rng = np.random.default_rng(seed)
    rgb = corpus_photo(max(height, 8), max(width, 8), seed)[:height, :width]
    beats = column_beats(component_planes(rgb, mode), width, height, mode, rng)
    return beats, width, height, mode


class Harness(StreamHarness):
    async def run(self, beats: np.ndarray, width: int, height: int, mode: int) -> np.ndarray:
        self.dut.width.value, self.dut.height.value, self.dut.mode.value = width, height, mode
        await self.start()
        await self.source.send(AxiStreamFrame(np.ascontiguousarray(beats, np.uint32).tobytes()))
        out = [bytes((await self.sink.recv()).tdata) for _ in range(len(beats))]
        await self.done()
        return np.frombuffer(b"".join(out), np.uint64)


def assert_pairs(got: np.ndarray, want: np.ndarray, what: str) -> None:
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{what}: {bad.size} of {len(want)} beats differ; first {bad[0]}: {got[bad[0]]:#x} != {want[bad[0]]:#x}"


@cocotb.test()
async def frames_bit_exact_with_idle_and_backpressure(dut):
    rng = np.random.default_rng(40)
    harness = Harness(dut)
    harness.source.set_pause_generator(random_pauses(rng, 0.3))
    harness.sink.set_pause_generator(random_pauses(rng, 0.3))
    await harness.reset()
    for k, case in enumerate(CASES):
        beats, width, height, mode = case_data(case, k)
        assert_pairs(await harness.run(beats, width, height, mode), c_model(beats, width, height, mode),
                     f"RTL vs C model, case {case}")
    assert dut.ap_idle.value == 1


@cocotb.test()
async def reset_in_the_middle_of_a_frame(dut):
    harness = Harness(dut)
    await harness.reset()
    beats, width, height, mode = case_data(CASES[-1], 7)
    harness.dut.width.value, harness.dut.height.value, harness.dut.mode.value = width, height, mode
    harness.dut.ap_start.value = 1
    await RisingEdge(dut.ap_clk)
    harness.dut.ap_start.value = 0
    await harness.source.send(AxiStreamFrame(np.ascontiguousarray(beats[: len(beats) // 2]).tobytes()))
    await harness.source.wait()
    await harness.reset()
    harness.sink.clear()
    assert dut.ap_idle.value == 1 and dut.m_axis_tvalid.value == 0
    assert_pairs(await harness.run(beats, width, height, mode), c_model(beats, width, height, mode), "after reset")


def full_rate_cycles(case, build: Path, seed: int = 0) -> int:
    """Streams one frame through the unit at full rate (plain Verilog on Icarus), checks every
    output beat against the C model, returns ap_start to ap_done in cycles."""
    beats, width, height, mode = case_data(case, seed)
    build.mkdir(parents=True, exist_ok=True)
    (build / "beats.hex").write_text("".join(f"{c:08x}{b:08x}{a:08x}\n" for a, b, c in beats.tolist()))
    vvp = build / "rate.vvp"
    subprocess.run(["iverilog", "-g2012", "-o", str(vvp), str(HERE / "upsample_rate_tb.v"), str(RTL / f"{UNIT}.v")],
                   check=True)
    result = subprocess.run(["vvp", "-n", str(vvp), f"+BEATS={build / 'beats.hex'}", f"+OUT={build / 'out.hex'}",
                             f"+WIDTH={width}", f"+HEIGHT={height}", f"+MODE={mode}", f"+COUNT={len(beats)}"],
                            check=True, capture_output=True, text=True)
    got = np.array([int(v, 16) for v in (build / "out.hex").read_text().split()], np.uint64)
    assert_pairs(got, c_model(beats, width, height, mode), f"full rate, case {case}")
    return int(re.search(r"CYCLES (\d+)", result.stdout)[1])


def test_upsample_color(tmp_path):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    reference_library()  # built once here, not in the simulator's process
    run_testbench(UNIT, {}, tmp_path / "sim", {})


def test_full_rate_two_pixels_a_cycle(tmp_path):
    """The reference frame (320x48, 4:2:0) at full rate: P + 1 cycles a row of P pixel pairs and 6
    to fill and drain the pipeline, the descriptor's latency (and II: the unit takes the next
    ap_start in the cycle it pulses ap_done)."""
    height, width = 48, 320
    cycles = full_rate_cycles((height, width, "420"), tmp_path)
    assert cycles == height * (width // 2 + 1) + 6 == LATENCY_CYCLES, cycles


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description="cycles of one frame through upsample_color at full rate")
    parser.add_argument("--rate", default="1280x720", help="WIDTHxHEIGHT (4:2:0)")
    size = parser.parse_args().rate
    w, h = map(int, size.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        n = full_rate_cycles((h, w, "420"), Path(tmp))
    print(f"upsample_color {w}x{h} 4:2:0: {n} cycles, {w * h / n:.3f} pixels a cycle")
