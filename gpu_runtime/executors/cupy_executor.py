"""The GPU executor: our CUDA kernels compiled with NVRTC (cupy.RawKernel), launched one by one.

Every kernel's first parameter is the guard flag, one int in device memory (DeviceFlag): once
set, kernels that start afterwards (or reach their next tile) return without writing. The arena
is one device allocation with buffers as views at the planned offsets; weights live in a separate
region uploaded once per loaded program. CuPy is imported lazily: without it (or without a CUDA
device) construction fails with a clear message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_runtime.compiler.program import BufferRef, KernelDef, Program

NVRTC_OPTIONS = ("--std=c++14",)


class CudaUnavailableError(RuntimeError):
    pass


def _cupy():
    try:
        import cupy
    except ImportError as e:
        raise CudaUnavailableError(
            "the cupy executor needs CuPy (pip install 'atoll[gpu]') and an NVIDIA GPU") from e
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError: no driver, no device
        raise CudaUnavailableError(f"the cupy executor found no usable CUDA device ({e})") from e
    if count == 0:
        raise CudaUnavailableError("the cupy executor found no CUDA device")
    return cupy


class DeviceFlag:
    """The preemption flag as one int in device memory. set()/clear() copy a pinned host word into
    it on a stream of its own (running kernels do not delay it) and return once it landed, so
    every block that starts afterwards sees it. Kernels read it from L2: one load per block."""

    def __init__(self):
        cp = _cupy()
        import cupyx

        self.device = cp.zeros(1, cp.int32)
        self._stream = cp.cuda.Stream(non_blocking=True)
        self._words = {}
        for v in (0, 1):
            w = cupyx.empty_pinned((1,), np.int32)
            w[0] = v
            self._words[v] = w
        self._value = 0

    def _write(self, v: int) -> None:
        self.device.set(self._words[v], stream=self._stream)
        self._stream.synchronize()
        self._value = v

    def set(self) -> None:
        self._write(1)

    def clear(self) -> None:
        self._write(0)

    def is_set(self) -> bool:
        return bool(self._value)


@dataclass
class CupyState:
    program: Program
    flag: DeviceFlag
    arena: Any
    weights: Any
    views: list
    args: list[tuple]
    stream: Any


class CupyExecutor:
    name = "cupy"
    preemptible = True

    def __init__(self):
        self._cp = _cupy()
        self._kernels: dict[str, Any] = {}

    def new_flag(self) -> DeviceFlag:
        return DeviceFlag()

    def compile(self, kernel: KernelDef):
        """NVRTC-compiles a kernel once per process (names are unique per source)."""
        fn = self._kernels.get(kernel.name)
        if fn is None:
            fn = self._cp.RawKernel(kernel.cuda_source, kernel.name, options=NVRTC_OPTIONS)
            fn.compile()
            self._kernels[kernel.name] = fn
        return fn

    def load(self, program: Program, flag: DeviceFlag | None = None) -> CupyState:
        cp = self._cp
        for kernel in program.kernels().values():
            self.compile(kernel)
        arena = cp.zeros(max(program.arena_bytes, 1), cp.uint8)
        weights = cp.empty(max(program.weight_bytes, 1), cp.uint8)
        views = []
        for i, spec in enumerate(program.buffers):
            region = weights if spec.role == "weight" else arena
            view = region[spec.offset:spec.offset + spec.nbytes].view(cp.float32).reshape(spec.shape)
            if spec.role == "weight":
                view.set(np.ascontiguousarray(program.weights[i], np.float32))
            views.append(view)
        flag = flag if flag is not None else self.new_flag()
        args = []
        for launch in program.launches:
            converted = [flag.device]
            for a in launch.args:
                if isinstance(a, BufferRef):
                    converted.append(views[a.index])
                elif isinstance(a, float):
                    converted.append(np.float32(a))
                else:
                    converted.append(np.int32(a))
            args.append(tuple(converted))
        cp.cuda.Device().synchronize()
        return CupyState(program, flag, arena, weights, views, args,
                         cp.cuda.Stream(non_blocking=True))

    def set_inputs(self, state: CupyState, inputs: dict[str, np.ndarray]) -> None:
        for index, value in state.program.checked_inputs(inputs):
            state.views[index].set(value, stream=state.stream)

    def launch(self, state: CupyState, index: int, stream=None) -> None:
        launch = state.program.launches[index]
        fn = self._kernels[launch.kernel.name]
        with stream or state.stream:
            fn(launch.grid, launch.block, state.args[index], shared_mem=launch.shared_bytes)

    def synchronize(self, state: CupyState, stream=None) -> None:
        (stream or state.stream).synchronize()

    def outputs(self, state: CupyState) -> dict[str, np.ndarray]:
        self.synchronize(state)
        return {name: self._cp.asnumpy(state.views[i]) for name, i in state.program.outputs.items()}

    def run(self, state: CupyState, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.set_inputs(state, inputs)
        for i in range(len(state.program.launches)):
            self.launch(state, i)
        return self.outputs(state)
