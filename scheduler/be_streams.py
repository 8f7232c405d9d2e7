"""The BE side of a vGPU: a queue per BE client, vHQs over the guarded streams, and the uploader.

Each BE client is bound to one vHQ when it is added; a free vHQ takes the oldest head among its
clients' queues (`vhq.round_robin`). BE inputs are copied in by a thread of their own: a BE batch
can take milliseconds to copy, and the submitting thread must stay free for the RT requests
behind it. A vHQ submits nothing of a task before its inputs are in.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Any, Callable

from scheduler.device import Stream
from scheduler.task import Task
from scheduler.vhq import VirtualHostQueue, round_robin


class BeStreams:
    def __init__(self, device: Any, capacity: int, streams: int):
        self._device = device
        self._vhqs = [VirtualHostQueue(device.stream(guarded=True), capacity) for _ in range(streams)]
        self._rr = [0] * streams
        self._queues: dict[str, deque[Task]] = {}
        self._uploads: queue.SimpleQueue = queue.SimpleQueue()
        self._uploader: threading.Thread | None = None

    @property
    def streams(self) -> list[Stream]:
        return [v.stream for v in self._vhqs]

    def add_client(self, name: str) -> None:
        self._queues[name] = deque()
        self._vhqs[(len(self._queues) - 1) % len(self._vhqs)].clients.append(name)

    def enqueue(self, task: Task) -> None:
        self._queues[task.client].append(task)

    def upload(self, task: Task) -> None:
        self._uploads.put(task)

    # ---- the uploader thread ---------------------------------------------------------------------
    def start(self) -> None:
        self._uploader = threading.Thread(target=self._upload_loop, name="reef-upload", daemon=True)
        self._uploader.start()

    def stop(self) -> None:
        if self._uploader is not None:
            self._uploads.put(None)
            self._uploader.join()

    def _upload_loop(self) -> None:
        while (task := self._uploads.get()) is not None:
            try:
                self._device.set_inputs(task.state, task.inputs)
            except Exception as e:  # answered once, like any other failure of the task
                task.fail(e)
                task.completed = task.n_launches
            task.inputs_loaded = True
            self._device.wake.set()

    # ---- what the scheduler asks -----------------------------------------------------------------
    def active(self) -> bool:
        return any(v.current is not None for v in self._vhqs)

    def running(self) -> list[Task]:
        return [v.current for v in self._vhqs if v.current is not None]

    def outstanding(self) -> bool:
        return any(v.stream.outstanding() for v in self._vhqs)

    def exited(self) -> bool:
        return all(v.stream.exited() for v in self._vhqs)

    def poll(self) -> None:
        for v in self._vhqs:
            v.stream.poll()

    def drain(self) -> None:
        for v in self._vhqs:
            v.stream.drain()

    def wait_idle(self) -> None:
        for v in self._vhqs:
            v.stream.drain()
            v.stream.poll()

    def rewind(self) -> None:
        """After a flush has drained the streams: each task back to its last completed kernel."""
        for v in self._vhqs:
            v.clear()

    def pump_all(self) -> None:
        for v in self._vhqs:
            v.pump()

    def schedule(self, policy: Any, ctl: Any, limit: int | None, begin: Callable[[Task], None],
                 finish: Callable[[Task], None]) -> None:
        """Finish what completed, give free vHQs a task, and submit up to the limits, as far as
        `policy` lets the scheduler `ctl` (asked per vHQ: each start changes its answer)."""
        for i, v in enumerate(self._vhqs):
            done = v.reap()
            if done is not None:
                finish(done)
            if v.idle() and policy.be_may_start(ctl):
                task, self._rr[i] = round_robin(self._queues, v.clients, self._rr[i])
                if task is not None:
                    begin(task)
                    v.assign(task)
            if v.current is not None and policy.be_may_issue(ctl):
                v.pump(limit=limit)

    def leftovers(self) -> list[Task]:
        """Every BE task not yet answered: running, then queued."""
        return self.running() + [t for q in self._queues.values() for t in q]
