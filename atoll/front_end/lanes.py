"""Preprocessing lanes of a front end: real-time work never queues behind best-effort work.

Real-time jobs run on a thread of their own (SCHED_FIFO where the OS permits); best-effort jobs on
`be_threads` threads whose OS priority is lowered (`gpu_runtime.priority.prioritise_this_thread`),
so an RT job starts at once and, on a busy CPU, takes a core from BE work rather than sharing it.
Given `cores`, each best-effort thread stays on one of them (in turn): left to the OS, busy lanes
that never lacked work left ~7 % of the 2-core VM idle at saturation (docs/data-plane.md,
"Settings that rest on a measurement").
OpenCV and NumPy release the GIL while they work, so the lanes run beside the front end's event
loop, which they answer through one `call_soon_threadsafe` per job.

A job may be `Batched`: a lane that takes one also takes jobs of the same key waiting behind it and
runs them in one call, as a dynamic batcher with no delay batches what is queued (a front end's
models on CPU vGPUs, `colocated.py`); their answers reach the loop in one wake. It takes no more
than its share of what waits (the queue over the lanes), so the other lanes are not left idle
(docs/data-plane.md).
"""

from __future__ import annotations

import asyncio
import collections
import queue
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from gpu_runtime.priority import Priority, pin_this_thread, prioritise_this_thread
from gpu_runtime.thread_names import name_this_thread


@dataclass(frozen=True)
class Batched:
    """A job that runs together with the waiting jobs of its `key`: `fn(items)` takes each job's
    arguments (a tuple per job, in order) and returns one result per job, an exception instance
    for a job that failed alone."""

    fn: Callable[[list[tuple]], list]
    key: Hashable
    limit: int


class Lanes:
    def __init__(self, be_threads: int = 1, cores: Sequence[int] = ()):
        if be_threads < 1:
            raise ValueError(f"need at least one best-effort thread, got {be_threads}")
        self._queues = {priority: queue.SimpleQueue() for priority in Priority}
        self._cores = tuple(cores)
        self._threads = [(priority, threading.Thread(target=self._loop, args=(priority, i),
                                                     name=f"lane-{priority}{i}", daemon=True))
                         for priority, n in ((Priority.RT, 1), (Priority.BE, be_threads)) for i in range(n)]
        self._count = {Priority.RT: 1, Priority.BE: be_threads}
        for _, thread in self._threads:
            thread.start()

    def run(self, priority: Priority, fn, *args, abandoned: Callable[[], None] | None = None) -> asyncio.Future:
        """`fn(*args)` on a lane (`fn` a `Batched`: with the other jobs of its key that wait); the
        future (of the calling event loop) gets its result or error.
        A job whose future is cancelled before it starts is skipped; once a cancelled job is over
        (skipped or run to its end), `abandoned` is called on the event loop."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queues[priority].put((loop, future, fn, args, abandoned))
        return future

    def close(self) -> None:
        """Run what is queued, then stop every thread."""
        for priority, _ in self._threads:
            self._queues[priority].put(None)
        for _, thread in self._threads:
            thread.join()

    def _loop(self, priority: Priority, index: int) -> None:
        name_this_thread()
        prioritise_this_thread(priority)
        if priority == Priority.BE and self._cores:
            pin_this_thread(self._cores[index % len(self._cores)])
        jobs = self._queues[priority]
        passed: collections.deque = collections.deque()  # jobs a batch passed over, next in order
        while (job := passed.popleft() if passed else jobs.get()) is not None:
            if isinstance(job[2], Batched):
                passed.extend(self._batch(jobs, job, 1 + jobs.qsize() // self._count[priority]))
            else:
                self._one(*job)

    @staticmethod
    def _one(loop, future, fn, args, abandoned) -> None:
        result = error = None
        if not future.cancelled():  # a stale read only runs a job nobody waits for
            try:
                result = fn(*args)
            except BaseException as exc:  # the caller's await raises it
                error = exc
        loop.call_soon_threadsafe(_settle, [(future, result, error, abandoned)])

    @staticmethod
    def _batch(jobs: queue.SimpleQueue, first: tuple, share: int) -> list[tuple]:
        """Run `first` with the jobs of its key waiting now (at most `share` jobs in all); the
        other jobs taken meanwhile."""
        batched, batch, later = first[2], [first], []
        while len(batch) < batched.limit and len(batch) + len(later) < share:
            try:
                job = jobs.get_nowait()
            except queue.Empty:
                break
            if job is None:  # closing: the sentinel goes back for the loop to see
                jobs.put(None)
                break
            fn = job[2]
            (batch if isinstance(fn, Batched) and fn.key == batched.key else later).append(job)
        live = [job for job in batch if not job[1].cancelled()]
        try:
            results = batched.fn([job[3] for job in live]) if live else []
        except BaseException as exc:  # every job of the batch gets it
            results = [exc] * len(live)
        outcome = dict(zip(map(id, live), results))
        settled: dict[asyncio.AbstractEventLoop, list] = {}
        for job in batch:
            settled.setdefault(job[0], []).append((job[1], *_split(outcome.get(id(job))), job[4]))
        for loop, answers in settled.items():  # one wake of each loop for all its jobs
            loop.call_soon_threadsafe(_settle, answers)
        return later


def core_share(cores: Sequence[int], index: int, count: int) -> list[int]:
    """Front end `index` of `count`'s part of `cores`: sorted, split in contiguous parts as even as
    can be, at least one core each (where there are fewer cores than front ends, some share one)."""
    cores, start = sorted(cores), index * len(cores) // count
    return cores[start:max(start + 1, (index + 1) * len(cores) // count)]


def _split(result) -> tuple:
    return (None, result) if isinstance(result, BaseException) else (result, None)


def _settle(settled: list[tuple]) -> None:
    for future, result, error, abandoned in settled:
        if future.cancelled():
            if abandoned is not None:
                abandoned()
        elif error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
