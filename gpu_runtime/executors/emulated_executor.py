"""A Program through its CUDA sources on the CPU: the numpy executor's host arena and views, with
every launch run by the CUDA emulator instead of the kernel's NumPy body. The guard is the real
one: the flag is an int32 word the kernels read through `atoll_preempt`, so a launch made while it
is set returns from ATOLL_GUARD without writing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpu_runtime.executors.device_memory import Region, buffer_views, host_memory
from gpu_runtime.executors.numpy_executor import HostArenaExecutor, bound_args, fill
from gpu_runtime.kernels.emulator import EmulatedKernel
from gpu_runtime.program import Program


class HostFlag:
    """The guard word in host memory; `word` is what launches pass as `atoll_preempt`."""

    def __init__(self):
        self.word = np.zeros(1, np.int32)

    def set(self) -> None:
        self.word[0] = 1

    def clear(self) -> None:
        self.word[0] = 0

    def is_set(self) -> bool:
        return bool(self.word[0])


@dataclass
class EmulatedState:
    program: Program
    flag: HostFlag
    views: list[np.ndarray]
    args: list[tuple]  # per launch: the flag word, then buffers as views and scalars
    weights: Region  # shared with the other programs of the model (`DeviceMemory`)
    arena: Region


class EmulatedExecutor(HostArenaExecutor):
    name = "cuda-emu"
    preemptible = True

    def __init__(self, blas_threads: int | None = None, memory_bytes: int | None = None):
        """`blas_threads` is the CPU-vGPU executor interface (emulated kernels use no BLAS);
        `memory_bytes` the emulated device's memory, accounted as the GPU's is (default: the
        machine's)."""
        self._kernels: dict[str, EmulatedKernel] = {}
        self.memory = host_memory(memory_bytes)

    def new_flag(self) -> HostFlag:
        return HostFlag()

    def load(self, program: Program, flag: HostFlag | None = None, *,
             weights: Region | None = None) -> EmulatedState:
        """As the cupy executor's load: weights shared by content (or `weights` given), the arena
        from `memory`'s group, a load that would not fit refused."""
        weights, arena, fresh = self.memory.regions(program, program.arena_bytes, weights)
        for name, kernel in program.kernels().items():
            if name not in self._kernels:
                self._kernels[name] = EmulatedKernel(kernel)
        flag = flag if flag is not None else self.new_flag()
        views = buffer_views(program, weights.array, arena.array, fill if fresh else None)
        args = [(flag.word, *a) for a in bound_args(program, views)]
        return EmulatedState(program, flag, views, args, weights, arena)

    def launch(self, state: EmulatedState, index: int, stream=None) -> None:
        launch = state.program.launches[index]
        self._kernels[launch.kernel.name].launch(launch.grid, launch.block, state.args[index],
                                                 launch.shared_bytes)
