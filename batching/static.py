"""Baseline: static batching, one queue per model, fixed batch size.

A batch goes only when `batch_size` requests are queued; the optional `timeout` (seconds) flushes a
partial batch whose oldest request has waited that long (without it a trickle of requests at the end
of a run would wait forever). Batches are placed like PREBA's: an idle vGPU, else the earliest
expected completion, padded to their longest input.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from batching.api import Dispatch, Item, ModelSettings, drop_queue
from batching.placement import ServiceTime, VgpuPlacement


class StaticBatcher:
    def __init__(self, vgpus: Mapping[str, str], service_time: ServiceTime, batch_size: int,
                 timeout: float | None = None, slots: Mapping[str, int] | None = None):
        if batch_size < 1 or (timeout is not None and timeout < 0):
            raise ValueError("batch_size must be >= 1 and timeout >= 0")
        self._pool = VgpuPlacement(vgpus, service_time, slots)
        self._batch_size = batch_size
        self._timeout = timeout
        self._queues: dict[str, deque[Item]] = {}

    def add_model(self, name: str, settings: ModelSettings) -> None:
        """Nothing to learn: every model is batched alike."""

    def remove_model(self, name: str) -> None:
        drop_queue(self._queues, name)

    def add(self, item: Item, now: float) -> None:
        self._queues.setdefault(item.model, deque()).append(item)

    def poll(self, now: float) -> list[Dispatch]:
        out = []
        while True:
            due = [(d, model) for model in self._queues
                   if (d := self._deadline(model)) is not None and d <= now]
            if not due:
                return out
            _, model = min(due)
            queue = self._queues[model]
            items = [queue.popleft() for _ in range(min(len(queue), self._batch_size))]
            pad_length = max(item.length for item in items)
            vgpu = self._pool.place(model, len(items), pad_length, now, self._pool.names)
            out.append(Dispatch(model, items, vgpu, "all", pad_length, self._batch_size))

    def next_deadline(self) -> float | None:
        return min((d for m in self._queues if (d := self._deadline(m)) is not None), default=None)

    def on_complete(self, vgpu: str, now: float) -> None:
        self._pool.complete(vgpu, now)

    def pending(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def _deadline(self, model: str) -> float | None:
        queue = self._queues[model]
        if len(queue) >= self._batch_size:
            return queue[self._batch_size - 1].arrival
        if queue and self._timeout is not None:
            return queue[0].arrival + self._timeout
        return None
