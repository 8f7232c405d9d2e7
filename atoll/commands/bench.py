"""`atoll bench <what>`: benchmarks that write JSON (and, on request, PNG plots).

Each module in BENCHES defines `register(subparsers)` like a top-level command.
"""

from __future__ import annotations

from types import ModuleType

from atoll.bench import disb, dpu, models, preempt, preprocess, robust, rt, serve, switch, worker

# benchmark -> its module
BENCHES: dict[str, ModuleType] = {
    "preprocess": preprocess, "models": models, "disb": disb, "preempt": preempt, "worker": worker,
    "serve": serve, "robust": robust, "dpu": dpu, "switch": switch, "rt": rt,
}


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="run a benchmark and write JSON results")
    sub = parser.add_subparsers(dest="bench", metavar="BENCHMARK")
    sub.required = True
    for module in BENCHES.values():
        module.register(sub)
