#!/usr/bin/env python3
"""The bounded-block report: per kernel variant of the zoo at the batcher's shapes, the longest
a block runs between two looks at the preemption flag on an H100 (gpu_runtime.kernels.bounds
states the model), longest first; exits 1 when one is over the bound. No GPU needed.

    python3 tools/block_bounds.py [--batches 1 32] [--frames 251 3001] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_runtime import nvcc_check
from gpu_runtime.kernels import bounds
from gpu_runtime.zoo import MODELS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=list(nvcc_check.BATCHES))
    parser.add_argument("--frames", nargs="+", type=int, default=list(nvcc_check.AUDIO_FRAMES))
    parser.add_argument("--precisions", nargs="+", default=["fp32", "fp16"])
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    rows = bounds.report(nvcc_check.zoo_programs(args.models, args.batches, args.precisions,
                                                 args.frames))
    print(f"{'us':>6s}  {'kernel':70s} {'launches':>8s}  longest in")
    for r in rows:
        print(f"{r.us:6.2f}  {r.kernel:70s} {r.launches:8d}  {r.where}")
    over = [r for r in rows if r.us > bounds.BOUND_US]
    print(f"{len(rows)} kernels; longest {rows[0].us:.2f} us ({rows[0].kernel}); "
          f"{len(over)} over the {bounds.BOUND_US:g} us bound")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
