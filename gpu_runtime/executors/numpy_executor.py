"""The reference executor: runs a Program launch by launch with each kernel's NumPy body.

Buffers are views into one arena array at the planned offsets (plus a weight region), so a
planning mistake shows up as wrong numbers here. The guard is a threading.Event checked before
every launch: when set, the launch returns without writing (CPU vGPUs preempt this way).

fp16 programs run as the CUDA kernels do: fp16 storage, fp32 arithmetic. A launch's float16
buffers are widened to float32 for its NumPy body and the ones it writes rounded back (to nearest
even, as __float2half_rn), so the reference semantics hold for both precisions.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_limits

from gpu_runtime.executors.device_memory import buffer_views
from gpu_runtime.program import BufferRef, Program


def host_views(program: Program) -> list[np.ndarray]:
    """Every buffer as a view into one host arena (weights into a weight region) at its planned
    offset, with the weights filled in."""
    return buffer_views(program, np.zeros(max(program.weight_bytes, 1), np.uint8),
                        np.zeros(max(program.arena_bytes, 1), np.uint8), fill)


def fill(view: np.ndarray, data: np.ndarray) -> None:
    view[...] = data


def bound_args(program: Program, views: list[np.ndarray]) -> list[tuple]:
    """Each launch's arguments with buffer references replaced by their views."""
    return [tuple(views[a.index] if isinstance(a, BufferRef) else a for a in launch.args)
            for launch in program.launches]


@dataclass
class NumpyState:
    program: Program
    flag: threading.Event
    views: list[np.ndarray]
    args: list[tuple]
    # per launch: (float16 argument positions, written ones) for fp16 programs, else None
    half: list = field(default_factory=list)
    completed: int = 0  # launches that ran to the end (not skipped by the guard)


class HostArenaExecutor:
    """What executors whose buffers are host views (`state.program`, `state.views`) share:
    inputs, outputs, and launches that run synchronously on the calling thread."""

    def set_inputs(self, state, inputs: dict[str, np.ndarray]) -> None:
        for index, value in state.program.checked_inputs(inputs):
            state.views[index][...] = value

    def synchronize(self, state, stream=None) -> None:
        """Launches run synchronously on the calling thread; nothing is ever pending."""

    def outputs(self, state) -> dict[str, np.ndarray]:
        return {name: state.views[i].copy() for name, i in state.program.outputs.items()}

    def execute(self, state, stream=None) -> None:
        """Every launch in order (the guard is still checked before each)."""
        for i in range(len(state.program.launches)):
            self.launch(state, i)

    def run(self, state, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.set_inputs(state, inputs)
        self.execute(state)
        return self.outputs(state)


class NumpyExecutor(HostArenaExecutor):
    """`blas_threads` caps the BLAS pool (process-wide): a CPU vGPU owns a few cores, and an
    oversubscribed OpenBLAS pool makes small matrix products many times slower (docs/gpu.md)."""

    name = "numpy"
    preemptible = True

    def __init__(self, blas_threads: int | None = None):
        if blas_threads is not None:
            threadpool_limits(limits=blas_threads, user_api="blas")

    def new_flag(self) -> threading.Event:
        return threading.Event()

    def load(self, program: Program, flag: threading.Event | None = None) -> NumpyState:
        views = host_views(program)
        return NumpyState(program, flag if flag is not None else self.new_flag(), views,
                          bound_args(program, views), [_half_args(launch, views)
                                                       for launch in program.launches])

    def launch(self, state: NumpyState, index: int, stream=None) -> None:
        if state.flag.is_set():
            return
        kernel, args = state.program.launches[index].kernel, state.args[index]
        half = state.half[index]
        if half is None:
            kernel.numpy_impl(*args)
        else:  # fp16 storage, fp32 arithmetic: what the CUDA kernels do around their loads/stores
            wide = list(args)
            for pos in half[0]:
                wide[pos] = args[pos].astype(np.float32)
            kernel.numpy_impl(*wide)
            for pos in half[1]:
                args[pos][...] = wide[pos]
        state.completed += 1


def _half_args(launch, views) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(positions of float16 buffer arguments, those of them the launch writes), or None."""
    positions = [i for i, a in enumerate(launch.args)
                 if isinstance(a, BufferRef) and views[a.index].dtype == np.float16]
    if not positions:
        return None
    return tuple(positions), tuple(i for i in positions if launch.args[i].index in launch.writes)
