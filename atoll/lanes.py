"""Preprocessing lanes of a front end: real-time work never queues behind best-effort work.

Real-time jobs run on a thread of their own; best-effort jobs on `be_threads` threads whose OS
priority is lowered (`gpu_runtime.priority.lower_this_thread`), so an RT job starts at once and, on a
busy CPU, takes a core from BE work rather than sharing it. OpenCV and NumPy release the GIL while
they work, so the lanes run beside the front end's event loop.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future

from gpu_runtime.priority import Priority, lower_this_thread


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

    def submit(self, priority: Priority, fn, *args) -> Future:
        future: Future = Future()
        self._queues[priority].put((future, fn, args))
        return future

    def close(self) -> None:
        """Run what is queued, then stop every thread."""
        for priority, _ in self._threads:
            self._queues[priority].put(None)
        for _, thread in self._threads:
            thread.join()

    def _loop(self, priority: Priority) -> None:
        lower_this_thread(priority)
        jobs = self._queues[priority]
        while (job := jobs.get()) is not None:
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # the caller's await raises it
                future.set_exception(exc)
