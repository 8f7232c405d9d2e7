"""The onnxruntime executor: a whole ONNX graph per call (ARCHITECTURE §7).

It is the fast path on CPU vGPUs and the reference the kernel-level executors are checked against.
A call cannot be interrupted, so it is not preemptible: the REEF scheduler treats a batch on it as
one indivisible kernel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime

from gpu_runtime.executors.bf16_io import SUFFIX, bf16_io
from gpu_runtime.thread_names import named_while


def default_providers(device: str) -> list[str]:
    """CUDA EP first on a GPU vGPU when this onnxruntime build has it; CPU always last."""

    available = onnxruntime.get_available_providers()
    providers = []
    if device != "cpu" and "CUDAExecutionProvider" in available:
        providers.append("CUDAExecutionProvider")
    providers.append("CPUExecutionProvider")
    return providers


class OrtExecutor:
    """One onnxruntime session over one model; `run` maps input names to arrays."""

    name = "onnxruntime"
    preemptible = False

    def __init__(
        self,
        onnx_path: str | Path,
        intra_op_threads: int | None = None,
        providers: list[str] | None = None,
        device: str = "cpu",
    ):
        options = onnxruntime.SessionOptions()
        if intra_op_threads:
            options.intra_op_num_threads = intra_op_threads
        # A vGPU worker runs one batch at a time; inter-op parallelism would oversubscribe its cores.
        options.inter_op_num_threads = 1
        # Threads that spin between parallel sections burn the cores a server's front ends
        # preprocess on (the cost: docs/gpu.md).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.bf16 = bf16_io(onnx_path)
        with named_while("exec-pool"):  # onnxruntime's pool threads, started here, take the name
            self.session = onnxruntime.InferenceSession(
                str(onnx_path) if self.bf16 is None else self.bf16.model, sess_options=options,
                providers=providers or default_providers(device))  # fmt: skip
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        if self.bf16 is not None:  # the graph's own names, as callers know them
            self.input_names = [n.removesuffix(SUFFIX) for n in self.input_names]
            self.output_names = [n.removesuffix(SUFFIX) for n in self.output_names]

    @property
    def providers(self) -> list[str]:
        return self.session.get_providers()

    def describe(self) -> dict:
        return {"executor": self.name, "providers": self.providers}

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = set(self.input_names) - set(inputs)
        if missing:
            raise KeyError(f"missing model inputs: {', '.join(sorted(missing))}")
        feeds = {name: inputs[name] for name in self.input_names}
        if self.bf16 is None:
            return dict(zip(self.output_names, self.session.run(self.output_names, feeds)))
        results = self.session.run([self.bf16.output_name(n) for n in self.output_names], self.bf16.feeds(feeds))
        return {name: self.bf16.result(name, array) for name, array in zip(self.output_names, results)}
