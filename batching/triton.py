"""Baseline: Triton's dynamic batcher, one queue per model.

Semantics followed (Triton's model configuration docs, `dynamic_batching`):
- A batch is formed only when a model instance (here a vGPU) is idle: instances pull work, so while
  all are busy requests keep queueing and the next batch grows, up to `max_batch_size`.
- With an idle vGPU, the batch is every queued request up to `max_batch_size`. It goes at once when
  it reaches `max_batch_size` or exactly a preferred size; otherwise it waits until its oldest request
  has been delayed `max_queue_delay_microseconds`, then sends the largest preferred size it can fill,
  or everything it has when no preferred size fits.
- Inputs of different lengths share the queue and the batch is padded to its longest input.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from batching.api import Dispatch, Item, ModelSettings, drop_queue
from batching.placement import ServiceTime, VgpuPlacement


@dataclass(frozen=True)
class TritonConfig:
    max_batch_size: int
    max_queue_delay_microseconds: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()

    def __post_init__(self):
        if self.max_batch_size < 1 or self.max_queue_delay_microseconds < 0:
            raise ValueError("max_batch_size must be >= 1 and max_queue_delay_microseconds >= 0")
        if any(not 1 <= p <= self.max_batch_size for p in self.preferred_batch_sizes):
            raise ValueError("preferred batch sizes must lie in [1, max_batch_size]")

    def due_at(self, queued: int, oldest_arrival: float) -> float:
        """When a queue of `queued` requests may go, given an idle instance."""
        size = min(queued, self.max_batch_size)
        if size == self.max_batch_size or size in self.preferred_batch_sizes:
            return oldest_arrival
        return oldest_arrival + self.max_queue_delay_microseconds * 1e-6

    def batch_size(self, queued: int, oldest_arrival: float, now: float) -> int:
        """How many requests to send at `now` (0 = keep waiting), given an idle instance."""
        if now < self.due_at(queued, oldest_arrival):
            return 0
        size = min(queued, self.max_batch_size)
        if size == self.max_batch_size or size in self.preferred_batch_sizes:
            return size
        return max((p for p in self.preferred_batch_sizes if p <= size), default=size)


class TritonBatcher:
    def __init__(self, vgpus: Mapping[str, str], service_time: ServiceTime, max_batch_size: int,
                 max_queue_delay_microseconds: int = 0, preferred_batch_sizes: Sequence[int] = (),
                 per_model: Mapping[str, TritonConfig] | None = None, slots: Mapping[str, int] | None = None):
        """The configuration applies to every model, except those given in `per_model`."""
        self._pool = VgpuPlacement(vgpus, service_time, slots)
        self._default = TritonConfig(max_batch_size, max_queue_delay_microseconds,
                                     tuple(preferred_batch_sizes))
        self._configs = dict(per_model or {})
        self._queues: dict[str, deque[Item]] = {}

    def add_model(self, name: str, settings: ModelSettings) -> None:
        self.remove_model(name)  # refused while it has items queued
        self._configs[name] = settings.triton

    def remove_model(self, name: str) -> None:
        drop_queue(self._queues, name)
        self._configs.pop(name, None)

    def add(self, item: Item, now: float) -> None:
        self._queues.setdefault(item.model, deque()).append(item)

    def poll(self, now: float) -> list[Dispatch]:
        out = []
        while idle := self._pool.idle(self._pool.names):
            ready = [
                (queue[0].arrival, model, size)
                for model, queue in self._queues.items()
                if queue and (size := self._config(model).batch_size(len(queue), queue[0].arrival, now))
            ]
            if not ready:
                break
            _, model, size = min(ready)
            queue = self._queues[model]
            items = [queue.popleft() for _ in range(size)]
            pad_length = max(item.length for item in items)
            vgpu = self._pool.place(model, size, pad_length, now, idle)
            out.append(Dispatch(model, items, vgpu, "all", pad_length,
                                self._config(model).max_batch_size))
        return out

    def next_deadline(self) -> float | None:
        if not self._pool.idle(self._pool.names):
            return None  # nothing can go before a vGPU completes (on_complete)
        deadlines = [
            self._config(model).due_at(len(queue), queue[0].arrival)
            for model, queue in self._queues.items() if queue
        ]
        return min(deadlines, default=None)

    def on_complete(self, vgpu: str, now: float) -> None:
        self._pool.complete(vgpu, now)

    def pending(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def _config(self, model: str) -> TritonConfig:
        return self._configs.get(model, self._default)
