"""How a vGPU worker loads a model on each executor: `load_<name>(onnx_path, info, max_batch)`
returns an object with `run(inputs) -> outputs` (dicts of arrays by tensor name) and `describe()`.
Loaders run inside the worker process, after the vGPU's environment is set; the CuPy executor
imports CuPy only when built, so nothing here touches CUDA before that."""

from __future__ import annotations

import contextlib

from gpu_runtime import green_context as vgpu_green_context
from gpu_runtime.compiler.shapes import ModelShapes
from gpu_runtime.executors.cupy_executor import CupyExecutor
from gpu_runtime.executors.emulated_executor import EmulatedExecutor
from gpu_runtime.executors.numpy_executor import NumpyExecutor
from gpu_runtime.executors.ort_executor import OrtExecutor


class ProgramRunner:
    """A kernel-program executor (numpy, cupy) behind the worker's run(inputs) call. Programs are
    planned per input shape (`model_shapes`) on first use and kept, so each bucketed batch size is
    imported once; with `max_batch`, fixed-shape models are planned up front for the sizes
    `ModelShapes.planned_keys` names (largest first), so the first batch of those sizes does not pay
    for the import (and, on cupy, NVRTC).

    Its caller runs one batch at a time (the serial engine's lock per model), so on executors with
    device memory every program shares one copy of the weights and one arena; a shape whose arena
    is larger than any before moves them all to its new one."""

    def __init__(self, executor, onnx_path, stream=None, max_batch=None):
        self.executor = executor
        self.stream = stream  # every state's stream, when the vGPU dictates one (green contexts)
        self.shapes = ModelShapes(onnx_path)
        self.name = str(onnx_path)
        self.memory = getattr(executor, "memory", None)
        self.states: dict[tuple[int, int | None], object] = {}
        for key in sorted(self.shapes.planned_keys(max_batch), reverse=True):
            self._state(key)

    def _state(self, key: tuple[int, int | None]):
        if key not in self.states:
            state = self.states[key] = self._load(self.shapes.program(key))
            if self.memory is not None:
                for other, old in list(self.states.items()):
                    if old.arena is not state.arena:  # the arena grew: the old one goes once unused
                        self.states[other] = self._load(old.program)
        return self.states[key]

    def _load(self, program):
        with self.memory.sharing(self.name, "runner") if self.memory is not None else contextlib.nullcontext():
            # Copies, graph captures, launches and syncs must all use the partition's stream.
            return (self.executor.load(program, stream=self.stream) if self.stream
                    else self.executor.load(program))

    def run(self, inputs):
        state = self._state(self.shapes.key(inputs))
        self.executor.set_inputs(state, inputs)
        self.executor.execute(state)
        return self.executor.outputs(state)

    def describe(self) -> dict:
        described = {"executor": self.executor.name, "preemptible": self.executor.preemptible}
        if self.memory is not None:
            described["device_memory"] = self.memory.held().get(self.name, {})
        return described


def load_onnxruntime(onnx_path, info, max_batch=None):
    """Whole-graph onnxruntime; any batch size the graph accepts (`max_batch` is not needed)."""

    device = "cpu" if info.kind == "cpu" else "cuda"
    return OrtExecutor(onnx_path, intra_op_threads=info.threads, device=device)


def load_numpy(onnx_path, info, max_batch=None):
    return ProgramRunner(NumpyExecutor(), onnx_path, max_batch=max_batch)


def load_cupy(onnx_path, info, max_batch=None):
    """On a green-context vGPU all work goes to the partition's stream: CuPy makes the device's
    primary context current on first use, so only streams made inside the green context stay on
    the partition (figures: docs/gpu.md)."""

    green = vgpu_green_context.active()
    stream = None
    if green:
        import cupy  # optional: CuPy, GPU only

        stream = cupy.cuda.ExternalStream(int(green["stream"]))
    return ProgramRunner(CupyExecutor(), onnx_path, stream=stream, max_batch=max_batch)


def load_cuda_emu(onnx_path, info, max_batch=None):
    return ProgramRunner(EmulatedExecutor(memory_bytes=info.memory_bytes), onnx_path, max_batch=max_batch)
