"""CPU vGPU: each stream is a worker thread draining a launch queue, mirroring a GPU stream.

The guard is one shared int32 word (the CPU twin of the host-mapped flag): a guarded stream checks
it before every kernel and, when set, drops the kernel without running it, which is what a guarded
CUDA kernel does when it returns at once. A kernel already running finishes (numpy cannot be
interrupted), so a flush waits for at most one kernel per stream.

Padding on CPU is a model, not a fused launch: the RT stream hands the chosen BE kernels to a
spare, unguarded pad thread that runs them while the RT kernel runs, and the RT kernel counts as
done when both have finished (a padded GPU kernel also ends with its last block).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Sequence

import numpy as np
from gpu_runtime.priority import Priority, prioritise_this_thread
from gpu_runtime.thread_names import name_this_thread

from scheduler.device import Kernel
from scheduler.padding import PaddingRules
from scheduler.task import Task


class CpuStream:
    def __init__(self, device: "CpuDevice", guarded: bool, name: str):
        self.guarded = guarded
        self._device = device
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._outstanding = 0
        self._idle = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, task: Task, index: int, pads: Sequence[Kernel] = (), preempt: bool = False) -> None:
        if preempt:
            self._device.set_flag()
        with self._idle:
            self._outstanding += 1
        self._queue.put((task, index, tuple(pads)))

    def outstanding(self) -> int:
        return self._outstanding

    def poll(self) -> None:
        self._device.poll()

    def exited(self) -> bool:
        return self._outstanding == 0

    def drain(self) -> None:
        with self._idle:
            self._idle.wait_for(self.exited)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _loop(self) -> None:
        name_this_thread()
        # With `os_priorities`, the RT stream takes a core from ordinary threads at once
        # (SCHED_FIFO where permitted), so other processes' threads cannot hold an RT kernel back
        # for a scheduler slice. Only for executors whose kernels run on the calling thread alone
        # (one BLAS thread): a SCHED_FIFO thread spin-waiting for BLAS workers that its own
        # priority keeps off the core never returns (a one-core worker hung so). BE streams stay
        # ordinary, not niced as a SerialEngine's BE lanes are: a NumPy kernel holds the
        # interpreter lock the RT stream needs, and a niced holder starved by other processes
        # kept it from the RT stream longer (docs/scheduling.md, "The benchmark").
        if self._device.os_priorities and not self.guarded:
            prioritise_this_thread(Priority.RT)
        device = self._device
        while True:
            item = self._queue.get()
            if item is None:
                return
            task, index, pads = item
            if not (self.guarded and device.flag_is_set()):
                padded = device.pad_stream.start(pads) if pads else None
                device.run_kernel(task, index)
                if padded is not None:
                    padded.wait()
            with self._idle:
                self._outstanding -= 1
                left = self._outstanding
                self._idle.notify_all()
            # Wake the scheduler only when it has something to do: a task to finish, or a vHQ
            # to refill. Each wake costs the running kernels the GIL for a loop iteration.
            if index == task.n_launches - 1 or (self.guarded and left <= 1):
                device.wake.set()


class PadStream:
    """The spare thread that runs padding kernels; one batch at a time, signalled when done."""

    def __init__(self, device: "CpuDevice"):
        self._device = device
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="exec-pad", daemon=True)
        self._thread.start()

    def start(self, pads: Sequence[Kernel]) -> threading.Event:
        done = threading.Event()
        self._queue.put((pads, done))
        return done

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _loop(self) -> None:
        name_this_thread()
        while True:
            item = self._queue.get()
            if item is None:
                return
            pads, done = item
            for task, index in pads:
                self._device.run_kernel(task, index)
            done.set()


class CpuDevice:
    """Streams over an executor whose `launch` runs a kernel synchronously (the numpy executor)."""

    limits = None  # occupancy is meaningless here: a kernel owns its thread
    # A guarded kernel is dropped before it starts and a started one always finishes, so the
    # streams' counters are exact and a flush re-runs nothing.
    exact_progress = True
    # Stream threads set `wake` whenever the scheduler has work, so the poll period is only a
    # safety net; short periods cost the kernels the GIL.
    poll_s = 5e-3
    # One spare thread runs the pads one after another, so they must fit under the RT kernel.
    padding_rules = PaddingRules(max_pads=4, serial=True, same_block=False)
    pads_in_hardware = False

    def __init__(self, executor: Any, clock: Callable[[], float] = time.perf_counter,
                 name: str = "cpu", os_priorities: bool = False):
        self.name = name
        self.os_priorities = os_priorities  # RT stream and scheduler loop at SCHED_FIFO (see CpuStream)
        self.executor = executor
        self.clock = clock
        self.wake = threading.Event()
        self._flag = np.zeros(1, dtype=np.int32)
        self._streams: list[CpuStream] = []
        self.pad_stream = PadStream(self)

    def stream(self, guarded: bool, priority: int = 0) -> CpuStream:
        # With `os_priorities` the unguarded (RT) stream takes the RT lanes' OS priority; `priority`
        # matters on CUDA.
        s = CpuStream(self, guarded, f"exec-stream{len(self._streams)}")
        self._streams.append(s)
        return s

    def load(self, program, guarded: bool) -> Any:
        # The streams check the device's flag before every kernel, so the executor's own flag
        # stays clear: pads must run under a set flag.
        return self.executor.load(program)

    def units(self, state) -> int:
        return len(state.program.launches)  # a CPU stream's unit is one kernel

    def poll(self) -> None:
        """The stream threads write `completed` themselves as each kernel ends: nothing to fold."""

    def set_inputs(self, state, inputs) -> None:
        self.executor.set_inputs(state, inputs)

    def started_at(self, task: Task) -> float | None:
        return task.first_kernel_s

    def resources(self, kernel) -> tuple[int, int]:
        return kernel.registers, kernel.shared_bytes

    def flag_is_set(self) -> bool:
        return bool(self._flag[0])

    def set_flag(self) -> None:
        self._flag[0] = 1

    def clear_flag(self) -> None:
        self._flag[0] = 0

    def run_kernel(self, task: Task, index: int) -> None:
        if task.future.done():  # failed earlier: its remaining kernels are dropped
            return
        task.mark_started(self.clock())
        cpu = time.thread_time()
        try:
            self.executor.launch(task.state, index)
        except Exception as e:  # the task fails once; the stream lives on
            task.fail(e)
            task.completed = task.n_launches
            return
        task.cpu_s += time.thread_time() - cpu
        task.executed += 1
        task.completed = index + 1

    def time_launch(self, state: Any, index: int) -> float:
        t0 = time.perf_counter()
        self.executor.launch(state, index)
        return time.perf_counter() - t0

    def close(self) -> None:
        for s in self._streams:
            s.close()
        self.pad_stream.close()
