"""Preprocessing lanes of a front end: real-time work never queues behind best-effort work.

Real-time jobs run on a thread of their own (SCHED_FIFO where the OS permits); best-effort jobs on
`be_threads` threads whose OS priority is lowered (`gpu_runtime.priority.prioritise_this_thread`),
so an RT job starts at once and, on a busy CPU, takes a core from BE work rather than sharing it.
OpenCV and NumPy release the GIL while they work, so the lanes run beside the front end's event
loop, which they answer through one `call_soon_threadsafe` per job.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable

from gpu_runtime.priority import Priority, prioritise_this_thread
from gpu_runtime.thread_names import name_this_thread


class Lanes:
    def __init__(self, be_threads: int = 1):
        if be_threads < 1:
            raise ValueError(f"need at least one best-effort thread, got {be_threads}")
        self._queues = {priority: queue.SimpleQueue() for priority in Priority}
        self._threads = [(priority, threading.Thread(target=self._loop, args=(priority,),
                                                     name=f"lane-{priority}{i}", daemon=True))
                         for priority, n in ((Priority.RT, 1), (Priority.BE, be_threads)) for i in range(n)]
        for _, thread in self._threads:
            thread.start()

    def run(self, priority: Priority, fn, *args, abandoned: Callable[[], None] | None = None) -> asyncio.Future:
        """`fn(*args)` on a lane; the future (of the calling event loop) gets its result or error.
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

    def _loop(self, priority: Priority) -> None:
        name_this_thread()
        prioritise_this_thread(priority)
        jobs = self._queues[priority]
        while (job := jobs.get()) is not None:
            loop, future, fn, args, abandoned = job
            result = error = None
            if not future.cancelled():  # a stale read only runs a job nobody waits for
                try:
                    result = fn(*args)
                except BaseException as exc:  # the caller's await raises it
                    error = exc
            loop.call_soon_threadsafe(_settle, future, result, error, abandoned)


def _settle(future: asyncio.Future, result, error, abandoned) -> None:
    if future.cancelled():
        if abandoned is not None:
            abandoned()
    elif error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
