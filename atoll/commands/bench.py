"""`atoll bench <what>`: benchmarks that write JSON (and, on request, PNG plots).

Each module in BENCHES defines `register(subparsers)` like a top-level command.
"""

from __future__ import annotations

import importlib

# benchmark -> module
BENCHES: dict[str, str] = {
    "preprocess": "atoll.bench.preprocess",
    "models": "atoll.bench.models",
    "disb": "atoll.bench.disb",
    "preempt": "atoll.bench.preempt",
    "worker": "atoll.bench.worker",
    "serve": "atoll.bench.serve",
    "robust": "atoll.bench.robust",
}


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="run a benchmark and write JSON results")
    sub = parser.add_subparsers(dest="bench", metavar="BENCHMARK")
    sub.required = True
    for module in BENCHES.values():
        importlib.import_module(module).register(sub)
