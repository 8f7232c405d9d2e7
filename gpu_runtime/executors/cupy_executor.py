"""The GPU executor: our CUDA kernels, cubins from the ahead-of-time cache (`kernels.cubins`, nvcc)
with NVRTC as the fallback for what it lacks, captured as CUDA graphs.

Every kernel's first parameter is the guard flag (DeviceFlag, one int in device memory): once set,
kernels that start afterwards (or reach their next tile) return without writing. Weights and arena
come from `device_memory.DeviceMemory`. A program is one graph: `execute` is one launch. With
`load(chunks=...)` runs of launches are graphs too, each ending in a marker (`kernels.markers`) that
stores the chunk's number in a host-mapped word unless the flag is set, so a preempted task resumes
after the last chunk that ran unflagged (arena re-planned for re-runs: `compiler.arena.chunked`);
`stamp=True` opens the graph with a marker of when it got an SM. No CuPy or device: `CudaUnavailableError`.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpu_runtime.compiler.arena import chunked
from gpu_runtime.executors.device_memory import DeviceMemory, Region, buffer_views
from gpu_runtime.kernels import cubins, markers
from gpu_runtime.program import BufferRef, KernelDef, Program

NVRTC_OPTIONS = ("--std=c++14",)
# Captures made while other threads serve: only this thread's unsafe calls may break a capture.
CAPTURE_MODE_THREAD_LOCAL = 1


class CudaUnavailableError(RuntimeError):
    pass


def _cupy():
    try:
        import cupy  # optional: CuPy, GPU only
    except ImportError as e:
        raise CudaUnavailableError(
            "the cupy executor needs CuPy (pip install 'atoll[gpu]', or 'atoll[gpu-cuda13]' with a "
            "CUDA 13 driver) and an NVIDIA GPU") from e
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
        import cupyx  # optional: CuPy, GPU only

        self.device = cp.zeros(1, cp.int32)
        self._stream = cp.cuda.Stream(non_blocking=True)
        self._words = {}
        for v in (0, 1):
            w = cupyx.empty_pinned((1,), np.int32)
            w[0] = v
            self._words[v] = w
        self._value = 0

    @property
    def address(self) -> int:
        return self.device.data.ptr

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

    def assume_set(self) -> None:
        """A stream-ordered write (the RT launcher's) raised it: keep the host's view in step."""
        self._value = 1


class MappedWord:
    """One int32 in host-mapped pinned memory: kernels store to it, the host reads it directly."""

    def __init__(self, cp):
        rt = cp.cuda.runtime
        self._rt = rt
        self._ptr = rt.hostAlloc(4, rt.hostAllocMapped)
        self.host = np.ctypeslib.as_array(ctypes.cast(self._ptr, ctypes.POINTER(ctypes.c_int32)), shape=(1,))
        self.host[0] = 0
        # Unified addressing: the mapped allocation has the same address on the device.
        self.device = cp.ndarray((1,), cp.int32, cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(self._ptr, 4, self), 0))

    @property
    def value(self) -> int:
        return int(self.host[0])

    def reset(self) -> None:
        self.host[0] = 0

    def __del__(self):
        try:
            self._rt.freeHost(self._ptr)
        except Exception:  # interpreter shutdown: the driver may be gone already
            pass


@dataclass
class CupyState:
    program: Program
    flag: DeviceFlag
    arena: Region
    weights: Region  # shared with the other programs of the model (`DeviceMemory`)
    views: list
    args: list[tuple]
    stream: Any
    ran_on: Any = None  # the stream of the last launch: outputs() waits for it
    graph: Any = None  # the whole program
    chunks: list[tuple[int, int]] = field(default_factory=list)  # launch ranges [start, end)
    chunk_graphs: list = field(default_factory=list)
    progress: MappedWord | None = None  # chunks completed with the flag clear (the markers' word)
    started: MappedWord | None = None  # set by the stamp kernel that opens `graph`


class CupyExecutor:
    name = "cupy"
    preemptible = True

    def __init__(self):
        self._cp = _cupy()
        self._kernels: dict[str, Any] = {}
        self.memory = DeviceMemory(lambda n: self._cp.zeros(n, self._cp.uint8), self._free_bytes,
                                   lambda: self._cp.cuda.runtime.memGetInfo()[1])
        self._marker = self.compile(markers.PROGRESS)
        self._stamp = self.compile(markers.STAMP)

    def new_flag(self) -> DeviceFlag:
        return DeviceFlag()

    def compile(self, kernel: KernelDef):
        """Loads a kernel once per process (names are unique per source): its cubin from the
        ahead-of-time cache (`kernels.cubins`) for this GPU's architecture, else NVRTC."""
        fn = self._kernels.get(kernel.name)
        if fn is None:
            cubin = cubins.cached(kernel, self._cp.cuda.Device().compute_capability)
            if cubin is not None:
                fn = self._cp.RawModule(path=str(cubin)).get_function(kernel.name)
            else:
                fn = self._cp.RawKernel(kernel.cuda_source, kernel.name, options=NVRTC_OPTIONS)
                fn.compile()
            self._kernels[kernel.name] = fn
        return fn

    def load(self, program: Program, flag: DeviceFlag | None = None, *, stream=None,
             chunks: list[tuple[int, int]] | None = None, stamp: bool = False,
             weights: Region | None = None) -> CupyState:
        """Takes the weights and arena from `memory` (weights shared by content, or `weights`
        given; the arena of the `memory.sharing` group, if any), uploads new weights and captures
        the graphs on `stream` (default: a new one). `chunks`: launch ranges captured one graph
        each, with the arena re-planned for chunk re-runs. `stamp`: the whole-program graph opens
        with the stamp kernel. DeviceMemoryError if it would not fit the vGPU."""
        cp = self._cp
        if chunks:
            program = chunked(program, chunks)
        weights, arena, fresh = self.memory.regions(program, program.arena_bytes, weights)
        for kernel in program.kernels().values():
            self.compile(kernel)
        views = buffer_views(program, weights.array, arena.array, _upload if fresh else None)
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
        state = CupyState(program, flag, arena, weights, views, args,
                          stream if stream is not None else cp.cuda.Stream(non_blocking=True))
        if stamp:
            state.started = MappedWord(cp)
        state.graph = self._capture(state, 0, len(program.launches), stamp=stamp)
        if chunks:
            state.chunks = list(chunks)
            state.progress = MappedWord(cp)
            state.chunk_graphs = [self._capture(state, a, b, marker=k + 1)
                                  for k, (a, b) in enumerate(chunks)]
        cp.cuda.Device().synchronize()
        return state

    def _capture(self, state: CupyState, start: int, end: int, marker: int = 0,
                 stamp: bool = False):
        stream = state.stream
        stream.begin_capture(CAPTURE_MODE_THREAD_LOCAL)
        try:
            with stream:
                if stamp:
                    self._stamp((1,), (1,), (state.started.device,))
                for i in range(start, end):
                    self._launch(state, i)
                if marker:
                    self._marker((1,), (1,), (state.flag.device, state.progress.device,
                                               np.int32(marker)))
        finally:
            graph = stream.end_capture()
        graph.upload(stream)
        return graph

    def _launch(self, state: CupyState, index: int) -> None:
        launch = state.program.launches[index]
        self._kernels[launch.kernel.name](launch.grid, launch.block, state.args[index],
                                          shared_mem=launch.shared_bytes)

    def set_inputs(self, state: CupyState, inputs: dict[str, np.ndarray]) -> None:
        for index, value in state.program.checked_inputs(inputs):
            state.views[index].set(value.astype(state.views[index].dtype, copy=False),
                                   stream=state.stream)

    def launch(self, state: CupyState, index: int, stream=None) -> None:
        """One kernel on its own (profiling, tests): the graphs are the fast path."""
        state.ran_on = stream or state.stream
        with state.ran_on:
            self._launch(state, index)

    def execute(self, state: CupyState, stream=None) -> None:
        """The whole program: one graph launch."""
        state.ran_on = stream or state.stream
        state.graph.launch(state.ran_on)

    def launch_chunk(self, state: CupyState, index: int, stream=None) -> None:
        state.ran_on = stream or state.stream
        state.chunk_graphs[index].launch(state.ran_on)

    def synchronize(self, state: CupyState, stream=None) -> None:
        (stream or state.stream).synchronize()

    def outputs(self, state: CupyState) -> dict[str, np.ndarray]:
        """Waits for the stream that ran the program last (not only the state's own)."""
        stream = state.ran_on or state.stream
        stream.synchronize()
        return {name: self._cp.asnumpy(state.views[i], stream=stream).astype(np.float32, copy=False)
                for name, i in state.program.outputs.items()}

    def _free_bytes(self) -> int:
        """What a new allocation may take: the device's free memory and CuPy's pooled free blocks."""
        return self._cp.cuda.runtime.memGetInfo()[0] + self._cp.get_default_memory_pool().free_bytes()

    def run(self, state: CupyState, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.set_inputs(state, inputs)
        self.execute(state)
        return self.outputs(state)


def _upload(view, data: np.ndarray) -> None:
    view.set(data)
