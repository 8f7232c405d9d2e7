"""Kernel-level testbench on hls/rtl/image_post_cu.v, the post-decode unit behind Vitis HLS's kernel
interface: sim_tb/hls_kernel drives it through AxiRam and AxiLiteMaster as it drives the
Vitis-exported image_cu (tests/sim_tb/test_hls_kernels.py).

Reference: the post-decode unit's C model (hls/image/image_postdecode.cpp, checked against cv2 and
NumPy by sim_tb/image_postdecode), laid out as the image CU writes its stages: uint8 HWC, float32
and float16 CHW. Three runs in one simulation, one per format; the output buffers start dirty.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from sim_tb.cocotb_run import RTL, descriptor_sources
from sim_tb.hls_kernel.hls_kernel import Arg, Run, run_kernel
from sim_tb.image_postdecode.test_image_postdecode import c_model, frame_arguments, natural_image

UNIT = "image_post_cu"
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ARGS = ["frame", "height", "width", "out", "dst_h", "dst_w", "crop_h", "crop_w", "format"]
# (src_h, src_w, resize_short, crop, format) as sim_tb/image_postdecode's cases.
CASES = [(37, 29, 20, 16, 0), (48, 64, 32, 28, 1), (9, 7, 24, 20, 2)]
# The kernel's own modules; the post-decode unit brings its descriptor's files.
PLUMBING = [UNIT, "image_post_cu_control_s_axi", "axi_pixel_reader", "axi_element_writer"]


def output_bytes(beats: np.ndarray, fmt: int) -> bytes:
    """The unit's beats as the image CU's writer lays them out."""
    if fmt == 0:
        return beats.astype(np.uint8).tobytes()  # HWC
    planes = beats.T.astype(np.uint32 if fmt == 1 else np.uint16)
    return np.ascontiguousarray(planes).tobytes()  # CHW


def test_image_post_cu(tmp_path):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    args = [Arg(name, f"gmem_{'in' if name == 'frame' else 'out'}" if name in ("frame", "out") else None)
            for name in ARGS]
    runs = []
    for k, case in enumerate(CASES):
        frame_args = frame_arguments(case)
        image = natural_image(case[0], case[1], seed=100 + k)
        expected = output_bytes(c_model(image, frame_args), case[4])
        scalars = dict(zip(["height", "width", "dst_h", "dst_w", "crop_h", "crop_w", "format"], frame_args))
        runs.append(Run(scalars, {"frame": image.tobytes(), "out": b"\xa5" * len(expected)}, {"out": expected}))
    run_kernel(UNIT, [RTL / f"{m}.v" for m in PLUMBING] + descriptor_sources("image_postdecode"), args, runs, tmp_path,
               (RTL / "image_post_cu_control_s_axi.v").read_text())
