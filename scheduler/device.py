"""The stream contract the scheduler drives, identical for CPU vGPUs and CUDA devices.

A device owns one preemption flag (the guard every kernel checks before it starts) and hands out
streams. A stream runs submitted kernels in order; `outstanding()` and the tasks' `completed`
counters are readable at any time without waiting for the device; `drain()` waits until every
submitted kernel has exited (run, or returned at once through the guard).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Protocol, Sequence

from gpu_runtime.program import Program

from scheduler.task import Task

# (task, launch index): one kernel of one task.
Kernel = tuple[Task, int]


class Stream(Protocol):
    guarded: bool  # False for the RT stream: RT kernels ignore the flag

    def submit(self, task: Task, index: int, pads: Sequence[Kernel] = (), preempt: bool = False) -> None:
        """Enqueue unit `index` of `task` (a kernel, or on CUDA a graph of several); `pads` are BE
        kernels run in the same padded launch; `preempt` raises the guard ahead of it, ordered
        with it (the RT stream's first unit under a flushing policy)."""

    def outstanding(self) -> int: ...

    def poll(self) -> None:
        """Fold finished kernels into their tasks' `completed` counters (no device sync)."""

    def exited(self) -> bool:
        """Whether every kernel submitted so far has exited (run, or dropped by the guard), without
        waiting: True once `drain()` would return at once."""

    def drain(self) -> None: ...

    def close(self) -> None: ...


class Device(Protocol):
    name: str
    wake: threading.Event  # set whenever a kernel exits, so the scheduler loop can sleep between polls
    # True when a flush leaves every task's `completed` exact up to at most one kernel that ran
    # (partly) and must be re-run; False when more may have run unseen (then `rerun_window` caps
    # the kernels a task may have in flight).
    exact_progress: bool
    limits: Any  # scheduler.profiler.DeviceLimits, or None where occupancy means nothing
    padding_rules: Any  # scheduler.padding.PaddingRules where pads are planned in software, or None
    pads_in_hardware: bool  # BE work may run beside RT work and the device pads (stream priorities)
    clock: Callable[[], float]
    poll_s: float  # scheduler loop sleep between polls (0: spin, yielding the GIL)

    def load(self, program: Program, guarded: bool) -> Any:
        """The executor state for `program`; guarded states' kernels obey the device's flag."""

    def units(self, state: Any) -> int:
        """How many units (what `Stream.submit` takes) a loaded program has."""

    def set_inputs(self, state: Any, inputs: dict) -> None:
        """Copy inputs in, ordered before any kernel later submitted to this device's streams."""

    def started_at(self, task: Task) -> float | None:
        """When the task's first kernel started, on the scheduler clock (asked once, at finish)."""

    def resources(self, kernel: Any) -> tuple[int, int]:
        """(registers per thread, static shared bytes) of a kernel, for occupancy."""

    def time_launch(self, state: Any, index: int) -> float:
        """Run one launch alone and return its duration in seconds (for the profiler)."""

    def stream(self, guarded: bool, priority: int = 0) -> Stream: ...

    def set_flag(self) -> None: ...

    def clear_flag(self) -> None: ...

    def close(self) -> None: ...
