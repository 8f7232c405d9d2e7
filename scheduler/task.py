"""A scheduled inference: a loaded program, how far it has got, and the future its client waits on."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from gpu_runtime.priority import Priority

RT, BE = Priority.RT, Priority.BE  # the scheduler's short names for the one definition


@dataclass
class TaskResult:
    outputs: dict[str, Any]
    arrival_s: float
    first_kernel_s: float  # when its first kernel started (preemption latency = this - arrival_s)
    launched_s: float | None  # RT tasks on CUDA: when the launch call began (arrival .. here: Python)
    end_s: float
    preemptions: int
    reruns: int  # kernels executed more than once because a preemption flushed them
    # CPU vGPUs: the CPU time its kernels took on their stream threads (thread_time, so neither a
    # wait for the interpreter lock nor a preempted core counts): what a WCET budget is checked on
    cpu_s: float = 0.0


@dataclass(eq=False)
class Task:
    """One request on one vGPU. Progress is `completed` (kernels known to have finished, written by
    the stream that ran them); `next_launch` is the next kernel to hand to a stream. After a
    preemption `next_launch` is rewound to `completed`, which is all restore needs."""

    id: int
    priority: str  # RT or BE
    client: str
    inputs: dict[str, Any]
    n_launches: int
    rerun_window: int  # largest number of kernels that may be in flight and safely re-run
    arrival_s: float
    inputs_loaded: bool = False  # uploaded at submission (the client's buffers were free)
    state: Any = None  # the executor's loaded-program state, bound when the task starts
    future: Future = field(default_factory=Future)
    next_launch: int = 0
    completed: int = 0
    first_kernel_s: float | None = None
    launched_s: float | None = None
    preemptions: int = 0
    executed: int = 0  # kernels actually run (>= n_launches; the excess is re-execution)
    cpu_s: float = 0.0  # CPU vGPUs: its kernels' thread CPU time (TaskResult.cpu_s)
    _done: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def finished_kernels(self) -> bool:
        return self.completed >= self.n_launches

    def mark_started(self, t: float) -> None:
        if self.first_kernel_s is None:
            self.first_kernel_s = t

    def finish(self, outputs: dict[str, Any], end_s: float) -> bool:
        """Resolve the future; a second call is a no-op and returns False (exactly-once delivery)."""
        with self._lock:
            if self._done:
                return False
            self._done = True
        first = self.first_kernel_s if self.first_kernel_s is not None else end_s
        self.future.set_result(TaskResult(outputs, self.arrival_s, first, self.launched_s, end_s,
                                          self.preemptions,
                                          self.executed - self.n_launches, self.cpu_s))
        return True

    def fail(self, error: BaseException) -> bool:
        with self._lock:
            if self._done:
                return False
            self._done = True
        self.future.set_exception(error)
        return True
