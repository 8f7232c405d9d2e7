"""Virtual host queue: the host-side launch queue in front of one BE stream.

The pending launches of a task are held compactly as the range [next_launch, n_launches); the
submitter moves them to the stream while fewer than `capacity` kernels are outstanding there (and
fewer than the task's rerun window are in flight), so a reset never has more than that many kernels
to re-run. Clearing is O(1) (rewind `next_launch` to the task's completed counter); the kernels
already on the stream are flushed by the guard and reclaimed by the stream itself as it reaches
them, without the host walking them.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

from scheduler.device import Stream
from scheduler.task import Task


class VirtualHostQueue:
    def __init__(self, stream: Stream, capacity: int):
        if capacity < 1:
            raise ValueError("vHQ capacity must be at least 1")
        self.stream = stream
        self.capacity = capacity
        self.clients: list[str] = []  # BE clients whose tasks this stream runs
        self.current: Task | None = None
        self.max_outstanding_seen = 0

    def idle(self) -> bool:
        return self.current is None

    def assign(self, task: Task) -> None:
        # One task at a time: a client's consecutive requests share its arena.
        assert self.current is None
        self.current = task

    def pump(self, limit: int | None = None) -> int:
        """Submit units of the current task up to the limits (`limit` outstanding at most, below
        the capacity: padding); returns how many were submitted."""
        task = self.current
        if task is None or not task.inputs_loaded:
            return 0
        capacity = min(self.capacity, limit or self.capacity)
        window = min(capacity, task.rerun_window)
        submitted = 0
        while (task.next_launch < task.n_launches and self.stream.outstanding() < capacity
               and task.next_launch - task.completed < window):
            self.stream.submit(task, task.next_launch)
            task.next_launch += 1
            submitted += 1
        self.max_outstanding_seen = max(self.max_outstanding_seen, self.stream.outstanding())
        return submitted

    def reap(self) -> Task | None:
        """Detach and return the current task once all its kernels have completed."""
        task = self.current
        if task is not None and task.finished_kernels:
            self.current = None
            return task
        return None

    def clear(self) -> None:
        """After the stream drained under the flag: rewind to the last completed kernel."""
        task = self.current
        if task is not None and not task.finished_kernels:
            task.preemptions += 1
            task.next_launch = task.completed


def round_robin(queues: dict[str, deque], clients: list[str], start: int) -> tuple[Task | None, int]:
    """The oldest-waiting head among `clients`' queues, scanning from `start` for fairness on ties."""
    best, best_i = None, start
    n = len(clients)
    for k in range(n):
        i = (start + k) % n
        q = queues[clients[i]]
        if q and (best is None or q[0].arrival_s < best.arrival_s):
            best, best_i = q[0], i
    if best is not None:
        queues[clients[best_i]].popleft()
    return best, (best_i + 1) % max(n, 1)


def chunk_bounds(durations_s: Sequence[float], target_s: float) -> list[tuple[int, int]]:
    """Consecutive launches grouped into vHQ entries of about `target_s` each: a chunk closes at
    the first launch that brings it to `target_s` (a launch longer than that is a chunk alone)."""
    bounds, start, acc = [], 0, 0.0
    for i, d in enumerate(durations_s):
        acc += d
        if acc >= target_s:
            bounds.append((start, i + 1))
            start, acc = i + 1, 0.0
    if start < len(durations_s):
        bounds.append((start, len(durations_s)))
    return bounds
