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
best-effort lanes kept busy (`LaneLoad`) wait up to that long for their share of the most they
recently held, as a dynamic batcher's queue delay: closed-loop clients whose answers just left send
again within it, and without it two lanes at 8 connections ran batches of 2-3 where 4 were theirs.
Lanes less busy run what waits, since there batches only add latency; one that recently held one
job at a time never waits (docs/data-plane.md).
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

# Lanes busier than this wait for their batches (`batch_wait_s`); less busy ones run what waits:
# batches then only add latency (docs/data-plane.md).
BUSY_TO_WAIT = 0.9


@dataclass(frozen=True)
class Batched:
    """A job that runs together with the waiting jobs of its `key`: `fn(items)` takes each job's
    arguments (a tuple per job, in order) and returns one result per job, an exception instance
    for a job that failed alone."""

    fn: Callable[[list[tuple]], list]
    key: Hashable
    limit: int


class LaneLoad:
    """What the lanes' batched jobs have been doing: how many they hold (queued or running), the most
    they held at once and the share of time they ran, each over the last `window_s` to 2 x
    `window_s`. The most held is how many requests a closed-loop client set keeps in flight, so a
    free lane knows how many more are on their way back; the share says whether waiting for them
    can pay (lanes that are not kept busy answer sooner alone)."""

    def __init__(self, window_s: float = 0.5, clock: Callable[[], float] = time.monotonic):
        self._lock = threading.Lock()
        self._clock = clock
        self._window_s = window_s
        self._held = 0
        self._peaks = [0, 0]  # this window's, the last one's
        self._ran = [0.0, 0.0]  # lane-seconds of batches ended, the same windows
        self._window_start = clock()

    def added(self) -> None:
        with self._lock:
            self._held += 1
            self._roll(self._clock())
            self._peaks[0] = max(self._peaks[0], self._held)

    def ran(self, jobs: int, seconds: float) -> None:
        """A batch of `jobs` ended after running `seconds`."""
        with self._lock:
            self._held -= jobs
            self._roll(self._clock())
            self._ran[0] += seconds

    def peak(self) -> int:
        return max(self._peaks)

    def busy(self, lanes: int) -> float:
        """The share of the time `lanes` ran batches, over the last window and this one so far."""
        with self._lock:
            return sum(self._ran) / ((self._clock() - self._window_start + self._window_s) * lanes)

    def _roll(self, now: float) -> None:
        if now - self._window_start >= self._window_s:
            recent = now - self._window_start < 2 * self._window_s
            self._peaks = [0, self._peaks[0] if recent else 0]
            self._ran = [0.0, self._ran[0] if recent else 0.0]
            self._window_start = now


class Lanes:
    def __init__(self, be_threads: int = 1, cores: Sequence[int] = (), batch_wait_s: float = 0.0,
                 load: LaneLoad | None = None):
        if be_threads < 1:
            raise ValueError(f"need at least one best-effort thread, got {be_threads}")
        self._queues = {priority: queue.SimpleQueue() for priority in Priority}
        self._cores = tuple(cores)
        self._threads = [(priority, threading.Thread(target=self._loop, args=(priority, i),
                                                     name=f"lane-{priority}{i}", daemon=True))
                         for priority, n in ((Priority.RT, 1), (Priority.BE, be_threads)) for i in range(n)]
        self._count = {Priority.RT: 1, Priority.BE: be_threads}
        self._batch_wait_s = batch_wait_s
        self.load = load or LaneLoad()
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
            self.load.added()
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
        waits (itself and the queue over the lanes) at once, or, best-effort lanes kept busy
        (BUSY_TO_WAIT), their share of the most they recently held where that is more, waiting up
        to `batch_wait_s` for them."""
        count = self._count[priority]
        if priority == Priority.RT or not self._batch_wait_s or self.load.busy(count) < BUSY_TO_WAIT:
            return share, 0.0
        wanted = math.ceil(self.load.peak() / count)
        return (wanted, self._batch_wait_s) if wanted > share else (share, 0.0)

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
        began = time.monotonic()
        try:
            results = batched.fn([job[3] for job in live]) if live else []
        except BaseException as exc:  # every job of the batch gets it
            results = [exc] * len(live)
        outcome = dict(zip(map(id, live), results))
        settled: dict[asyncio.AbstractEventLoop, list] = {}
        for job in batch:
            settled.setdefault(job[0], []).append((job[1], *_split(outcome.get(id(job))), job[4]))
        self.load.ran(len(batch), time.monotonic() - began)  # before the answers: the next request counts anew
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
