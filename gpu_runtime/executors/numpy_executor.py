"""The reference executor: runs a Program launch by launch with each kernel's NumPy body.

Buffers are views into one arena array at the planned offsets (plus a weight region), so a
planning mistake shows up as wrong numbers here. The guard is a threading.Event checked before
every launch: when set, the launch returns without writing (CPU vGPUs preempt this way).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from gpu_runtime.compiler.program import BufferRef, Program


@dataclass
class NumpyState:
    program: Program
    flag: threading.Event
    views: list[np.ndarray]
    args: list[tuple]
    completed: int = 0  # launches that ran to the end (not skipped by the guard)


class NumpyExecutor:
    """`blas_threads` caps the BLAS pool (process-wide): a CPU vGPU owns a few cores, and an
    oversubscribed OpenBLAS pool made small matrix products 50x slower in our measurements."""

    name = "numpy"
    preemptible = True

    def __init__(self, blas_threads: int | None = None):
        if blas_threads is not None:
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=blas_threads, user_api="blas")

    def new_flag(self) -> threading.Event:
        return threading.Event()

    def load(self, program: Program, flag: threading.Event | None = None) -> NumpyState:
        arena = np.zeros(max(program.arena_bytes, 1), np.uint8)
        weights = np.zeros(max(program.weight_bytes, 1), np.uint8)
        views = []
        for i, spec in enumerate(program.buffers):
            region = weights if spec.role == "weight" else arena
            view = region[spec.offset:spec.offset + spec.nbytes].view(spec.dtype).reshape(spec.shape)
            if spec.role == "weight":
                view[...] = program.weights[i]
            views.append(view)
        args = [tuple(views[a.index] if isinstance(a, BufferRef) else a for a in launch.args)
                for launch in program.launches]
        return NumpyState(program, flag if flag is not None else self.new_flag(), views, args)

    def set_inputs(self, state: NumpyState, inputs: dict[str, np.ndarray]) -> None:
        for index, value in state.program.checked_inputs(inputs):
            state.views[index][...] = value

    def launch(self, state: NumpyState, index: int, stream=None) -> None:
        if state.flag.is_set():
            return
        state.program.launches[index].kernel.numpy_impl(*state.args[index])
        state.completed += 1

    def execute(self, state: NumpyState, stream=None) -> None:
        """Every launch in order (the guard is still checked before each)."""
        for i in range(len(state.program.launches)):
            self.launch(state, i)

    def synchronize(self, state: NumpyState, stream=None) -> None:
        """Launches run synchronously on the calling thread; nothing is ever pending."""

    def outputs(self, state: NumpyState) -> dict[str, np.ndarray]:
        return {name: state.views[i].copy() for name, i in state.program.outputs.items()}

    def run(self, state: NumpyState, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.set_inputs(state, inputs)
        self.execute(state)
        return self.outputs(state)
