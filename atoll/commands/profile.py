"""`atoll profile MODEL --vgpu ID --out PROFILE.json`: measure a knee profile on one vGPU.

For every input length (audio) and batch size, runs `--repeats` timed batches (after `--warmup`
untimed ones) through the real vGPU worker path (atoll.bench.knee_profile), records the tail latency
and the worker's CPU ms per input, and derives Batch_max / Time_knee per bucket by batching.knee's
rule for the vGPU (the latency knee on GPUs, the per-input cost floor on CPU vGPUs), with `--load`
preprocessing processes busy beside it. If --out already holds a profile of the same vGPU kind, the
measured model is added or replaced in it; `--plot` draws cost and latency against batch size.
"""

from __future__ import annotations

import argparse
import sys

from batching.profile import ProfileError
from batching.sweep import parse_rates

from atoll.bench.knee_profile import profile_on_vgpu


def register(subparsers) -> None:
    p = subparsers.add_parser("profile", help="measure latency over batch size (and length) on a vGPU")
    p.add_argument("model", help="model name in the repository")
    p.add_argument("--vgpu", help="vGPU id from `atoll info` (default: the first one found)")
    p.add_argument("--vgpu-mode", default="auto", help="vGPU discovery mode (auto|mig|gpu|cpu)")
    p.add_argument("--repository", help="Triton-layout model repository (default: built-in demo)")
    p.add_argument("--lengths", default="2.5:35:2.5",
                   help="audio lengths in s, comma list or START:STOP:STEP (bucket upper edges)")
    p.add_argument("--batches", default="1,2,4,8,16,32,64", help="comma list of batch sizes")
    p.add_argument("--repeats", type=int, default=10, help="timed batches per point")
    p.add_argument("--warmup", type=int, default=2,
                   help="untimed batches per point (>= 1: the first also builds the input)")
    p.add_argument("--percentile", type=float, default=95.0, help="tail latency percentile")
    p.add_argument("--executor", default="auto",
                   help="model executor, as `atoll serve` takes it (default auto: cupy on GPUs, "
                        "onnxruntime on CPU vGPUs)")
    p.add_argument("--load", type=int,
                   help="CPU preprocessing processes decoding JPEGs beside the vGPU while it is "
                        "measured (default: one per core but one on CPU vGPUs, none on GPUs)")
    p.add_argument("--out", required=True, help="profile JSON to write")
    p.add_argument("--plot", help="PNG of per-input CPU cost and latency against batch size")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        batches = parse_batches(args.batches)
        lengths = parse_lengths(args.lengths)
        if args.repeats < 1 or args.warmup < 1 or not 0 < args.percentile <= 100:
            raise ValueError("--repeats must be >= 1, --warmup >= 1, --percentile in (0, 100]")
        if args.load is not None and args.load < 0:
            raise ValueError("--load must be >= 0")
        profile_on_vgpu(args, batches, lengths)
    except (ValueError, ProfileError, RuntimeError, OSError) as e:
        print(f"atoll profile: {e}", file=sys.stderr)
        return 2
    return 0


def parse_batches(spec: str) -> list[int]:
    try:
        sizes = sorted({int(x) for x in spec.split(",")})
    except ValueError:
        raise ValueError(f"--batches must be a comma list of integers, not {spec!r}") from None
    if sizes[0] < 1:
        raise ValueError("batch sizes must be >= 1")
    return sizes


def parse_lengths(spec: str) -> list[float]:
    if ":" in spec:
        return parse_rates(spec)  # the same START:STOP:STEP grammar
    try:
        lengths = sorted({float(x) for x in spec.split(",")})
    except ValueError:
        raise ValueError(f"--lengths must be numbers in seconds, not {spec!r}") from None
    if lengths[0] <= 0:
        raise ValueError("lengths must be positive")
    return lengths
