"""Executor registry for vGPU workers: executor name -> loader, imported only when first used.

A loader takes (onnx_path, info, max_batch) and returns an object with `run(inputs) -> outputs`
(dicts of arrays by tensor name) and a `describe()` dict. Loaders import their backend inside the
worker process, after the vGPU's environment is set, so CUDA is never touched before that.
"""

from __future__ import annotations

import importlib

# executor -> "module:loader"
EXECUTORS: dict[str, str] = {
    "onnxruntime": "gpu_runtime.vgpu_executors:load_onnxruntime",
    "numpy": "gpu_runtime.vgpu_executors:load_numpy",
    "cupy": "gpu_runtime.vgpu_executors:load_cupy",
}


class UnknownExecutor(ValueError):
    pass


def loader(executor: str):
    try:
        module, attr = EXECUTORS[executor].split(":")
    except KeyError:
        raise UnknownExecutor(
            f"unknown executor {executor!r}; available: {', '.join(sorted(EXECUTORS))}"
        ) from None
    return getattr(importlib.import_module(module), attr)


def load_onnxruntime(onnx_path, info, max_batch=None):
    """Whole-graph onnxruntime; any batch size the graph accepts (`max_batch` is not needed)."""
    from gpu_runtime.ort_executor import OrtExecutor

    device = "cpu" if info.kind == "cpu" else "cuda"
    return OrtExecutor(onnx_path, intra_op_threads=info.threads, device=device)


class ProgramRunner:
    """A kernel-program executor (numpy, cupy) behind the worker's run(inputs) call. Programs are
    planned per input shape (`model_shapes`) on first use and kept, so each bucketed batch size is
    imported once; with `max_batch`, fixed-shape models are planned up front for the sizes
    `ModelShapes.planned_keys` names, so the first batch of those sizes does not pay for the import
    (and, on cupy, NVRTC)."""

    def __init__(self, executor, onnx_path, stream=None, max_batch=None):
        from gpu_runtime.model_shapes import ModelShapes

        self.executor = executor
        self.stream = stream  # replaces the executor's own stream in every state (green contexts)
        self.shapes = ModelShapes(onnx_path)
        self.states: dict[tuple[int, int | None], object] = {}
        for key in self.shapes.planned_keys(max_batch):
            self._state(key)

    def _state(self, key: tuple[int, int | None]):
        if key not in self.states:
            self.states[key] = self.executor.load(self.shapes.program(key))
            if self.stream is not None:
                # Copies, launches and syncs must all use the partition's stream, in order.
                self.states[key].stream = self.stream
        return self.states[key]

    def run(self, inputs):
        state = self._state(self.shapes.key(inputs))
        self.executor.set_inputs(state, inputs)
        for index in range(len(state.program.launches)):
            self.executor.launch(state, index)
        self.executor.synchronize(state)
        return self.executor.outputs(state)

    def describe(self) -> dict:
        return {"executor": self.executor.name, "preemptible": self.executor.preemptible}


def load_numpy(onnx_path, info, max_batch=None):
    from gpu_runtime.numpy_executor import NumpyExecutor

    return ProgramRunner(NumpyExecutor(), onnx_path, max_batch=max_batch)


def load_cupy(onnx_path, info, max_batch=None):
    """On a green-context vGPU all work goes to the partition's stream: CuPy makes the device's
    primary context current on first use, so only streams made inside the green context (measured on
    an H100: 16 of 132 SMs ran a compute-bound kernel 7.8x slower) stay on the partition."""
    from gpu_runtime import vgpu_green_context
    from gpu_runtime.cupy_executor import CupyExecutor

    green = vgpu_green_context.active()
    stream = None
    if green:
        import cupy

        stream = cupy.cuda.ExternalStream(int(green["stream"]))
    return ProgramRunner(CupyExecutor(), onnx_path, stream=stream, max_batch=max_batch)
