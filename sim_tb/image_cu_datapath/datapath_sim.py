"""Whole JPEG files through the image CU's RTL datapath (hls/rtl/image_cu_datapath.v), cycle by cycle.

The harness is jpeg_entropy_tb.v with DATAPATH (sim_tb/jpeg_entropy_decode/entropy_sim.py builds
and runs it): the file's table writes and scan bytes go in from the first scan byte, the
post-decode unit's output beats come out; `run` checks every beat and the status against the four
units' C models chained (strip_model.datapath), within a cycle limit, and returns each file's
cycles and Huffman symbols. Icarus for small files (`make test`), Verilator for large ones
(`atoll bench dpu`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim_tb.jpeg_entropy_decode import entropy_sim
from sim_tb.jpeg_mcu_strip import strip_model

U8, F32, F16 = 0, 1, 2  # image_postdecode's output formats
CORRUPT = entropy_sim.CORRUPT


@dataclass
class Job:
    name: str
    jpeg: bytes
    scan: entropy_sim.Scan
    frame: list[int]  # width, height, sampling, mode, dst_h, dst_w, crop_h, crop_w, format
    status: int       # the C models' status
    beats: np.ndarray  # the C models' output beats (n, 3) uint32


def resize_dims(h: int, w: int, r: int) -> tuple[int, int]:
    """torchvision's shorter side to r (image_postdecode.h's resize_dims)."""
    return (r, r * w // h) if h <= w else (r * h // w, r)


def job(name: str, jpeg: bytes, resize_short: int | None, crop: int | None, fmt: int) -> Job:
    """One file with the post-decode unit's arguments as the image CU passes them (None: identity)."""
    scan = entropy_sim.reference_scan(jpeg)
    args = strip_model.strip_args(jpeg)
    assert scan.status == 0 and args is not None, name
    dst_h, dst_w = resize_dims(args.height, args.width, resize_short) if resize_short else (args.height, args.width)
    crop_h, crop_w = (crop, crop) if crop else (dst_h, dst_w)
    post = (dst_h, dst_w, crop_h, crop_w, fmt)
    status, beats = strip_model.datapath(jpeg, post)
    return Job(name, jpeg, scan, [args.width, args.height, args.sampling, args.mode, *post], status, beats)


def lanes(beats: np.ndarray) -> np.ndarray:
    """96-bit output beats (Python ints) as (n, 3) uint32 lanes."""
    return np.array([[(int(b) >> (32 * k)) & 0xFFFFFFFF for k in range(3)] for b in beats],
                    np.uint32).reshape(-1, 3)


def harness_params(jobs: list[Job], stalls: int = 0) -> dict[str, int]:
    """The harness's parameters for these files (memory sizes, stalls, a cycle limit per file of 64
    a scan byte and 8 a pixel): one build serves every subset of them."""
    limit = max(64 * len(j.jpeg) + 8 * j.frame[0] * j.frame[1] for j in jobs) + 20000
    return entropy_sim.harness_sizes([(j.jpeg, j.scan) for j in jobs]) | {
        "IDLE_256": stalls, "STALL_256": stalls, "CYCLE_LIMIT": limit}


def run(jobs: list[Job], work: Path, simulator: str = "icarus", params: dict[str, int] | None = None
        ) -> list[entropy_sim.SimResult]:
    """Runs the files one after another on one datapath (params: harness_params, by default these
    files' at full rate); asserts every file's status and beats equal the C models' (a CORRUPT file:
    its status and its beat count, since the RTL core may stop a block earlier). Returns the results."""
    pairs = [(j.jpeg, j.scan) for j in jobs]
    params = params or harness_params(jobs)
    limit = params["CYCLE_LIMIT"]
    results = entropy_sim.run_jobs(pairs, work, simulator, params=params, frames=[j.frame for j in jobs])
    assert len(results) == len(jobs), f"{jobs[len(results) - 1].name}: hung (the harness's cycle limit, {limit})"
    for j, got in zip(jobs, results):
        assert got.status == j.status, (j.name, got.status, j.status)
        beats = lanes(got.beats)
        assert len(beats) == len(j.beats), (j.name, len(beats), len(j.beats))
        if j.status != CORRUPT:
            bad = np.flatnonzero((beats != j.beats).any(axis=1))
            assert bad.size == 0, f"{j.name}: {bad.size} of {len(beats)} beats differ, first {bad[0]}"
    return results
