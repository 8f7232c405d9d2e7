"""Which executor runs a model: the server's kernel runtime (`--executor` numpy or cupy: preemptible
kernel programs) where it implements every operator the importer leaves unfolded, every tensor is
floating point and every shape is known at load (a program is built per shape, and nothing is
built on the request path), onnxruntime otherwise. Chosen per model at load and said once in the log."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx
from gpu_runtime.compiler.importer import missing_operators
from gpu_runtime.executors import DEFAULT_EXECUTOR, program_executors

FALLBACK = DEFAULT_EXECUTOR  # the whole-graph executor, which runs any operator and datatype
FLOATS = ("FP32", "FP16")  # what the kernel programs compute in


@dataclass(frozen=True)
class Choice:
    executor: str | None  # None: the pool's own (the server's)
    missing: tuple[str, ...] = ()  # operators the kernel runtime lacks
    reason: str = ""  # why not the server's executor ("" when it is)


def choose(server_executor: str | None, onnx_path: Path, datatypes: list[str], variable: list[str] = (),
           instances: int = 1) -> Choice:
    """`datatypes`: those of the model's inputs and outputs; `variable`: its inputs with a -1
    dimension whose sizes no load-time length fixes (beside the batch dimension); `instances`: the
    most executor instances its `instance_group` asks of one vGPU (REEF runs one per vGPU)."""
    if server_executor not in program_executors():
        return Choice(server_executor)
    missing = missing_operators(onnx.load(str(onnx_path), load_external_data=False))
    others = sorted({d for d in datatypes if d not in FLOATS})
    if missing:
        return Choice(FALLBACK, missing, f"{server_executor} lacks operator(s) {', '.join(missing)}")
    if others:
        return Choice(FALLBACK, (), f"{server_executor} computes in {'/'.join(FLOATS)}, not {', '.join(others)}")
    if instances > 1:
        return Choice(FALLBACK, (), f"instance_group asks for {instances} instances on a vGPU, and {server_executor} "
                                    "runs one (REEF interleaves its programs)")  # fmt: skip
    if variable:
        return Choice(FALLBACK, (), f"{server_executor} builds a program per shape at load, and input(s) "
                                    f"{', '.join(variable)} have variable dimensions")  # fmt: skip
    return Choice(server_executor)

