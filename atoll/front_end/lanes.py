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
runs them in one call, as a dynamic batcher batches what is queued (a front end's models on CPU
vGPUs, `colocated.py`); their answers reach the loop in one wake. It takes no more than its share of
what waits (the queue over the lanes), so the other lanes are not left idle. Given `batch_wait_s`,
a best-effort lane that finds fewer jobs than its share of the most the lanes recently held
(`InHand`) waits up to that long for the rest, as a dynamic batcher's queue delay: closed-loop
clients whose answers just left send again within it, and without it two lanes at 8 connections
ran batches of 2-3 where 4 were theirs (docs/data-plane.md). A lane that recently held one job at a
time never waits.
"""

from __future__ import annotations

import asyncio
import collections
import math
import queue
import threading
import time
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


class InHand:
    """How many batched jobs the lanes hold (queued or running), and the most they held in the last
    `window_s` to 2 x `window_s`: how many a closed-loop client set keeps in flight, so a lane
    knows how many more are on their way back."""

    def __init__(self, window_s: float = 0.5, clock: Callable[[], float] = time.monotonic):
        self._lock = threading.Lock()
        self._clock = clock
        self._window_s = window_s
        self._held = 0
        self._peaks = [0, 0]  # this window's, the last one's
        self._window_start = clock()

    def add(self) -> None:
        with self._lock:
            self._held += 1
            now = self._clock()
            if now - self._window_start >= self._window_s:
                self._peaks = [0, self._peaks[0] if now - self._window_start < 2 * self._window_s else 0]
                self._window_start = now
            self._peaks[0] = max(self._peaks[0], self._held)

    def done(self, n: int) -> None:
        with self._lock:
            self._held -= n

    def peak(self) -> int:
        return max(self._peaks)


class Lanes:
    def __init__(self, be_threads: int = 1, cores: Sequence[int] = (), batch_wait_s: float = 0.0):
        if be_threads < 1:
            raise ValueError(f"need at least one best-effort thread, got {be_threads}")
        self._queues = {priority: queue.SimpleQueue() for priority in Priority}
        self._cores = tuple(cores)
        self._threads = [(priority, threading.Thread(target=self._loop, args=(priority, i),
                                                     name=f"lane-{priority}{i}", daemon=True))
                         for priority, n in ((Priority.RT, 1), (Priority.BE, be_threads)) for i in range(n)]
        self._count = {Priority.RT: 1, Priority.BE: be_threads}
        self._batch_wait_s = batch_wait_s
        self.in_hand = InHand()
        for _, thread in self._threads:
            thread.start()

    def run(self, priority: Priority, fn, *args, abandoned: Callable[[], None] | None = None) -> asyncio.Future:
        """`fn(*args)` on a lane (`fn` a `Batched`: with the other jobs of its key that wait); the
        future (of the calling event loop) gets its result or error.
        A job whose future is cancelled before it starts is skipped; once a cancelled job is over
        (skipped or run to its end), `abandoned` is called on the event loop."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if isinstance(fn, Batched):
            self.in_hand.add()
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
                share = 1 + jobs.qsize() // self._count[priority]
                passed = self._batch(jobs, passed, job, *self._wanted(priority, share))
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

    def _wanted(self, priority: Priority, share: int) -> tuple[int, float]:
        """How many jobs a free lane takes, and how long it waits for them: its `share` of what
        waits (itself and the queue over the lanes) at once, or, best-effort, its share of the most
        the lanes recently held where that is more, waiting up to `batch_wait_s` for them."""
        wanted = share if priority == Priority.RT else math.ceil(self.in_hand.peak() / self._count[priority])
        return (wanted, self._batch_wait_s) if wanted > share and self._batch_wait_s else (share, 0.0)

    def _batch(self, jobs: queue.SimpleQueue, passed: collections.deque, first: tuple, wanted: int,
               wait_s: float) -> collections.deque:
        """Run `first` with the jobs of its key passed over before, waiting now or coming within
        `wait_s`, up to `wanted` jobs taken in all (`_wanted`); the jobs passed over, in order."""
        batched, batch, later = first[2], [first], collections.deque()
        for job in passed:
            (batch if len(batch) < batched.limit and _joins(job, batched) else later).append(job)
        until = time.monotonic() + wait_s
        while len(batch) < batched.limit and len(batch) + len(later) < wanted:
            try:
                job = jobs.get_nowait()
            except queue.Empty:
                left = until - time.monotonic()
                if left <= 0:
                    break
                try:
                    job = jobs.get(timeout=left)
                except queue.Empty:
                    break
            if job is None:  # closing: the sentinel goes back for the loop to see
                jobs.put(None)
                break
            (batch if _joins(job, batched) else later).append(job)
        live = [job for job in batch if not job[1].cancelled()]
        try:
            results = batched.fn([job[3] for job in live]) if live else []
        except BaseException as exc:  # every job of the batch gets it
            results = [exc] * len(live)
        outcome = dict(zip(map(id, live), results))
        settled: dict[asyncio.AbstractEventLoop, list] = {}
        for job in batch:
            settled.setdefault(job[0], []).append((job[1], *_split(outcome.get(id(job))), job[4]))
        self.in_hand.done(len(batch))  # before the answers: a client's next request counts anew
        for loop, answers in settled.items():  # one wake of each loop for all its jobs
            loop.call_soon_threadsafe(_settle, answers)
        return later


def core_share(cores: Sequence[int], index: int, count: int) -> list[int]:
    """Front end `index` of `count`'s part of `cores`: sorted, split in contiguous parts as even as
    can be, at least one core each (where there are fewer cores than front ends, some share one)."""
    cores, start = sorted(cores), index * len(cores) // count
    return cores[start:max(start + 1, (index + 1) * len(cores) // count)]


def _joins(job: tuple, batched: Batched) -> bool:
    return isinstance(job[2], Batched) and job[2].key == batched.key


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
