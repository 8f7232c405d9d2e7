"""cocotb testbench: hls/rtl/image_postdecode.v is the image CU's resize -> crop -> normalise, bit for bit.

References: the unit's C model (hls/image/image_postdecode.cpp, what the image CU runs in C
simulation) behind postdecode_ref.cpp through ctypes, and the libraries it is specified against:
cv2.resize(INTER_LINEAR) cropped at torchvision CenterCrop's offsets (uint8), then NumPy float32
(px / 255 - mean) / std and its float16 cast. Frames: down- and upscales, odd sizes, an extreme
aspect ratio, one pixel, the identity (decode-only stage) and a crop without resize, in each format,
with random idle cycles on the pixel stream and backpressure on the beats; a frame after a reset in
the middle of another; the reference frame at full rate against the descriptor's latency.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import cocotb
import cv2
import numpy as np
import pytest
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamFrame

from sim_tb.c_model import HLS, build_shared_library
from sim_tb.cocotb_run import descriptor_sources, random_pauses, run_testbench
from sim_tb.stream_harness import StreamHarness

UNIT = "image_postdecode"
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
U8, F32, F16 = 0, 1, 2

_PERFORMANCE = json.loads((REPO / "hls" / "rtl" / f"{UNIT}.json").read_text())["rtl_performance"]
LATENCY_CYCLES = int(_PERFORMANCE["latency"])
II_CYCLES = int(_PERFORMANCE["II"])
DEFAULT_DIM_WIDTH = 14

# (src_h, src_w, resize_short or None for the identity, crop or None for the whole frame, format).
# The first is the reference frame of the descriptor's latency and II.
CASES = [
    (48, 64, 32, 28, F32),
    (37, 29, 20, 16, U8),
    (9, 7, 24, 20, F16),
    (5, 40, 8, None, U8),
    (30, 30, None, None, U8),
    (1, 1, 6, 5, F32),
    (64, 48, None, 40, F16),
    (31, 57, 16, 15, U8),
    (61, 45, 40, 33, F32),
]


def resize_dims(h: int, w: int, r: int) -> tuple[int, int]:
    """torchvision.transforms.Resize(r): shorter side r, longer int(r * long / short)."""
    return (r, int(r * w / h)) if h <= w else (int(r * h / w), r)


def crop_offsets(h: int, w: int, crop_h: int, crop_w: int) -> tuple[int, int]:
    """torchvision.transforms.CenterCrop placement."""
    return int(round((h - crop_h) / 2.0)), int(round((w - crop_w) / 2.0))


def frame_arguments(case) -> tuple[int, ...]:
    """(src_h, src_w, dst_h, dst_w, crop_h, crop_w, format) as the image CU passes them."""
    src_h, src_w, r, crop, fmt = case
    dst_h, dst_w = resize_dims(src_h, src_w, r) if r else (src_h, src_w)
    crop_h, crop_w = (crop, crop) if crop else (dst_h, dst_w)
    return src_h, src_w, dst_h, dst_w, crop_h, crop_w, fmt


def natural_image(h: int, w: int, seed: int) -> np.ndarray:
    """Smooth gradients plus noise, uint8 RGB."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = rng.uniform(0, 255, 3) + rng.uniform(-3, 3, 3) * x[..., None] + rng.uniform(-3, 3, 3) * y[..., None]
    return np.clip(base + rng.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8)


def reference_library() -> ctypes.CDLL:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    lib = ctypes.CDLL(str(build_shared_library(
        [HERE / "postdecode_ref.cpp", HLS / "image" / "image_postdecode.cpp"],
        [*(HLS / "image").glob("*.h"), *(HLS / "common").glob("*.h")],
        REPO / "build" / "sim_tb" / UNIT, "postdecode_ref")))
    lib.postdecode_ref.argtypes = [ctypes.c_void_p] + [ctypes.c_uint32] * 7 + [ctypes.c_void_p]
    return lib


def c_model(image: np.ndarray, args) -> np.ndarray:
    """(crop_h * crop_w, 3) uint32 beats of the C model."""
    image = np.ascontiguousarray(image)
    beats = np.zeros((args[4] * args[5], 3), np.uint32)
    reference_library().postdecode_ref(image.ctypes.data, *args, beats.ctypes.data)
    return beats


def library_reference(image: np.ndarray, args) -> np.ndarray:
    """The same beats from cv2.resize, the CenterCrop window and NumPy's normalisation."""
    src_h, src_w, dst_h, dst_w, crop_h, crop_w, fmt = args
    resized = image if (dst_h, dst_w) == (src_h, src_w) else cv2.resize(image, (dst_w, dst_h),
                                                                        interpolation=cv2.INTER_LINEAR)
    top, left = crop_offsets(dst_h, dst_w, crop_h, crop_w)
    pixels = resized[top:top + crop_h, left:left + crop_w].reshape(-1, 3)
    if fmt == U8:
        return pixels.astype(np.uint32)
    values = (pixels.astype(np.float32) / np.float32(255) - MEAN) / STD
    return values.view(np.uint32) if fmt == F32 else values.astype(np.float16).view(np.uint16).astype(np.uint32)


def pixel_beats(image: np.ndarray) -> bytes:
    """The frame as the unit's beats: each row's pixels (4 bytes, channel k in byte k),
    PIXELS_PER_BEAT to a beat, a row's last beat padded with zeros."""
    per_beat = int(os.environ.get("TB_PIXELS_PER_BEAT", "2"))
    h, w = image.shape[:2]
    padded = np.zeros((h, -(-w // per_beat) * per_beat, 4), np.uint8)
    padded[:, :w, :3] = image
    return padded.tobytes()


class Harness(StreamHarness):
    """The unit's clock, streams and block-level handshake."""

    async def start_frame(self, args) -> None:
        for name, value in zip(("src_h", "src_w", "dst_h", "dst_w", "crop_h", "crop_w", "format"), args):
            getattr(self.dut, name).value = value
        await self.start()

    async def run(self, image: np.ndarray, args) -> np.ndarray:
        """One frame: (crop_h * crop_w, 3) uint32 beats, after ap_done."""
        await self.start_frame(args)
        await self.source.send(AxiStreamFrame(pixel_beats(image)))
        beats = [bytes((await self.sink.recv()).tdata) for _ in range(args[4] * args[5])]
        await self.done()
        return np.frombuffer(b"".join(beats), np.uint32).reshape(-1, 3)


def assert_beats(got: np.ndarray, want: np.ndarray, what: str) -> None:
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"{what}: {bad.size} of {len(want)} beats differ; first {bad[0]}: {got[bad[0]]} != {want[bad[0]]}"


@cocotb.test()
async def frames_bit_exact_with_idle_and_backpressure(dut):
    """Every case against the C model, and the C model against cv2 + NumPy."""
    rng = np.random.default_rng(16)
    harness = Harness(dut)
    harness.source.set_pause_generator(random_pauses(rng, 0.3))
    harness.sink.set_pause_generator(random_pauses(rng, 0.3))
    await harness.reset()
    for k, case in enumerate(CASES):
        args = frame_arguments(case)
        image = natural_image(case[0], case[1], seed=k)
        want = c_model(image, args)
        assert_beats(want, library_reference(image, args), f"C model vs cv2/NumPy, case {case}")
        assert_beats(await harness.run(image, args), want, f"RTL vs C model, case {case}")
    assert dut.ap_idle.value == 1


@cocotb.test()
async def reset_in_the_middle_of_a_frame(dut):
    """A synchronous reset halfway through the pixels leaves no trace in the next frame."""
    harness = Harness(dut)
    await harness.reset()
    args = frame_arguments(CASES[1])
    image = natural_image(CASES[1][0], CASES[1][1], seed=99)
    await harness.start_frame(args)
    half = pixel_beats(image)
    await harness.source.send(AxiStreamFrame(half[: len(half) // 16 * 8]))
    await harness.source.wait()
    await harness.reset()
    harness.sink.clear()
    assert dut.ap_idle.value == 1 and dut.m_axis_tvalid.value == 0
    assert_beats(await harness.run(image, args), c_model(image, args), "after reset")


@cocotb.test()
async def reference_frame_latency_and_interval(dut):
    """Full rate, ap_start held high: ap_start to ap_done takes LATENCY cycles, and the next frame
    starts II cycles after the first. The descriptor describes the default DIM_WIDTH = 14; the tap
    generators' setup brings down DIM_WIDTH numerator bits, so a narrower one saves as many cycles."""
    harness = Harness(dut)
    await harness.reset()
    args = frame_arguments(CASES[0])
    image = natural_image(CASES[0][0], CASES[0][1], seed=0)
    want = c_model(image, args)
    cycle, starts, dones = 0, [], []

    async def monitor():
        nonlocal cycle
        while True:
            await RisingEdge(dut.ap_clk)
            if dut.ap_start.value == 1 and dut.ap_ready.value == 1:
                starts.append(cycle)
                if len(starts) == 2:
                    dut.ap_start.value = 0
            if dut.ap_done.value == 1:
                dones.append(cycle)
            cycle += 1

    cocotb.start_soon(monitor())
    for name, value in zip(("src_h", "src_w", "dst_h", "dst_w", "crop_h", "crop_w", "format"), args):
        getattr(dut, name).value = value
    dut.ap_start.value = 1
    for _ in range(2):
        await harness.source.send(AxiStreamFrame(pixel_beats(image)))
    beats = [bytes((await harness.sink.recv()).tdata) for _ in range(2 * len(want))]
    while len(dones) < 2:
        await RisingEdge(dut.ap_clk)
    got = np.frombuffer(b"".join(beats), np.uint32).reshape(-1, 3)
    assert_beats(got, np.concatenate([want, want]), "reference frame, twice")
    saved = DEFAULT_DIM_WIDTH - int(os.environ["TB_DIM_WIDTH"])
    if int(os.environ.get("TB_PIXELS_PER_BEAT", "2")) == 1:  # twice the beats to read: slower
        assert dones[0] - starts[0] > LATENCY_CYCLES, (starts, dones)
        return
    assert dones[0] - starts[0] == LATENCY_CYCLES - saved, (starts, dones)
    assert starts[1] - starts[0] == II_CYCLES - saved, (starts, dones)


def full_rate_cycles(image: np.ndarray, args, build: Path) -> int:
    """Streams one frame through the unit (default parameters: two pixels a beat) at full rate,
    plain Verilog on Icarus, checks every output beat against the C model, returns ap_start to
    ap_done in cycles."""
    build.mkdir(parents=True, exist_ok=True)
    words = np.frombuffer(pixel_beats(image), np.uint64)
    (build / "beats.hex").write_text("".join(f"{v:016x}\n" for v in words.tolist()))
    vvp = build / "rate.vvp"
    subprocess.run(["iverilog", "-g2012", "-o", str(vvp), str(HERE / "postdecode_rate_tb.v"),
                    *map(str, descriptor_sources(UNIT))], check=True)
    names = ("SRC_H", "SRC_W", "DST_H", "DST_W", "CROP_H", "CROP_W", "FORMAT")
    result = subprocess.run(["vvp", "-n", str(vvp), f"+BEATS={build / 'beats.hex'}", f"+OUT={build / 'out.hex'}",
                             f"+COUNT={len(words)}", *(f"+{n}={v}" for n, v in zip(names, args))],
                            check=True, capture_output=True, text=True)
    got = np.array([[int(v[16:], 16), int(v[8:16], 16), int(v[:8], 16)]
                    for v in (build / "out.hex").read_text().split()], np.uint32)
    assert_beats(got, c_model(image, args), f"full rate, {image.shape[:2]}")
    return int(re.search(r"CYCLES (\d+)", result.stdout)[1])


def test_full_rate_two_pixels_a_cycle(tmp_path):
    """An ImageNet-sized frame (500x375 to 224x224 float32, as the image CU resizes it) at full
    rate: the reader sets the pace, two source pixels a cycle, plus the taps' setup."""
    args = frame_arguments((375, 500, 256, 224, F32))
    cycles = full_rate_cycles(natural_image(375, 500, seed=5), args, tmp_path)
    assert 375 * 250 < cycles < 375 * 250 + 1000, cycles


# The parameter sets swept from pytest: room to spare, and lines and dimensions just wide enough
# for the widest frame (64) and the largest dimension (64 < 2^7) of the cases.
PARAMETER_SETS = {
    "max_width_128_dim_14": {"MAX_WIDTH": 128, "DIM_WIDTH": 14},
    "max_width_64_dim_7": {"MAX_WIDTH": 64, "DIM_WIDTH": 7},
    "one_pixel_a_beat": {"MAX_WIDTH": 128, "DIM_WIDTH": 14, "PIXELS_PER_BEAT": 1},
}


@pytest.mark.parametrize("parameters", list(PARAMETER_SETS.values()), ids=list(PARAMETER_SETS))
def test_image_postdecode(parameters, tmp_path):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    reference_library()  # built once here, not in the simulator's process
    run_testbench(UNIT, parameters, tmp_path / "sim", {})


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description="cycles of one frame through image_postdecode at full rate")
    parser.add_argument("--rate", default="1280x720", help="source WIDTHxHEIGHT, resized to 256, cropped to 224")
    w, h = map(int, parser.parse_args().rate.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        n = full_rate_cycles(natural_image(h, w, seed=1), frame_arguments((h, w, 256, 224, F32)), Path(tmp))
    print(f"image_postdecode {w}x{h} -> 224x224 float32: {n} cycles, {w * h / n:.3f} source pixels a cycle")
