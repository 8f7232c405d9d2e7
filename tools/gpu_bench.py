#!/usr/bin/env python3
"""`atoll bench preempt`, `disb` and `rt` without the atoll CLI, whose parser imports every
command and with them the server's packages (httptools, tritonclient, soundfile) that the GPU
machine's image lacks; these benchmarks need none of them. Same options as under `atoll`.

    python3 tools/gpu_bench.py preempt|disb|rt [options]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from atoll.bench import disb, preempt, rt

BENCHES = (preempt, disb, rt)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu_bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="bench", required=True)
    for bench in BENCHES:
        bench.register(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
