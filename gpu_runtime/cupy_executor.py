"""The GPU executor: our CUDA kernels compiled with NVRTC (cupy.RawKernel), launched one by one.

Every kernel's first parameter is the guard flag. The flag is one int in host-mapped pinned
memory: the host sets it with a plain store, and kernels that start afterwards (or reach their
next tile) return without writing. The arena is one device allocation with buffers as views at
the planned offsets; weights live in a separate region uploaded once per loaded program.
CuPy is imported lazily: without it (or without a CUDA device) construction fails with a clear
message.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_runtime.program import BufferRef, KernelDef, Program

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


class PinnedFlag:
    """The preemption flag in host-mapped pinned memory: host stores, kernels read via PCIe."""

    def __init__(self):
        cp = _cupy()
        rt = cp.cuda.runtime
        self._rt = rt
        self._host_ptr = rt.hostAlloc(4, rt.hostAllocMapped)
        self._host = np.ctypeslib.as_array(ctypes.cast(self._host_ptr, ctypes.POINTER(ctypes.c_int32)),
                                           shape=(1,))
        self._host[0] = 0
        # With unified addressing (every 64-bit CUDA platform) a mapped pinned allocation has
        # the same address on host and device; CuPy does not wrap cudaHostGetDevicePointer.
        dev_ptr = self._host_ptr
        mem = cp.cuda.UnownedMemory(dev_ptr, 4, self)
        self.device = cp.ndarray((1,), cp.int32, cp.cuda.MemoryPointer(mem, 0))

    def set(self) -> None:
        self._host[0] = 1

    def clear(self) -> None:
        self._host[0] = 0

    def is_set(self) -> bool:
        return bool(self._host[0])

    def __del__(self):
        try:
            self._rt.freeHost(self._host_ptr)
        except Exception:  # interpreter shutdown: the driver may already be gone
            pass


@dataclass
class CupyState:
    program: Program
    flag: PinnedFlag
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

    def new_flag(self) -> PinnedFlag:
        return PinnedFlag()

    def compile(self, kernel: KernelDef):
        """NVRTC-compiles a kernel once per process (names are unique per source)."""
        fn = self._kernels.get(kernel.name)
        if fn is None:
            fn = self._cp.RawKernel(kernel.cuda_source, kernel.name, options=NVRTC_OPTIONS)
            fn.compile()
            self._kernels[kernel.name] = fn
        return fn

    def load(self, program: Program, flag: PinnedFlag | None = None) -> CupyState:
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
        for name, index in state.program.inputs.items():
            if name not in inputs:
                raise KeyError(f"missing input {name!r}")
            value = np.ascontiguousarray(inputs[name], np.float32)
            if value.shape != state.views[index].shape:
                raise ValueError(f"input {name!r}: shape {value.shape}, program expects "
                                 f"{state.views[index].shape}")
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
