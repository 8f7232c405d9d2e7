"""PREBA's bucketed dynamic batcher.

Per model, inputs are bucketed by length; each bucket is a FIFO with its own Batch_max (the profiled
Batch_knee) and Time_queue = Time_knee / number of vGPUs serving the model. A bucket dispatches when
it holds Batch_max inputs or its oldest input has waited Time_queue. A short batch is topped up from
neighbouring buckets, nearest and then shorter first (a shorter input neither raises the padded
length nor lowers the limit); a merged batch stays within its longest input's Batch_max and is padded
to that length. A full batch goes at once to an idle vGPU, else the one expected to finish first
(`VgpuPlacement`); a short one waits for an idle vGPU while its bucket keeps filling: placed on busy
vGPUs, batches of 2-3 would queue and gain nothing (`short_batches_wait_for_idle`, batching/README.md).
Items with a priority level (Triton's `priority_levels`) queue ahead of lower levels in their bucket;
the bucket still times out by its oldest item.

With residency (PipeSwitch, docs/residency.md) an injected `switch_time(model, vgpu)` says how long a
batch of a model not held by that vGPU spends switching it in (0 when held). The switch is accounted
in Time_queue: a bucket of a model held nowhere waits that much longer, so one switch serves a fuller
batch; among due buckets the held models' go first; a batch goes to a vGPU holding its model when
one of them is idle.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping

from batching.api import Dispatch, Item, ModelSettings
from batching.buckets import ModelBatching
from batching.placement import ServiceTime, VgpuPlacement

SwitchTime = Callable[[str, str], float]  # (model, vGPU id) -> seconds a batch spends switching it in


_NO_LEVEL = float("inf")


class _ModelQueues:
    def __init__(self, policy: ModelBatching, vgpus: list[str]):
        self.policy = policy
        self.vgpus = vgpus
        self.fifos: list[deque[Item]] = [deque() for _ in policy.buckets]
        self.queued = 0  # items in all its fifos
        self.time_queue = [b.time_knee / len(vgpus) for b in policy.buckets]
        self.levelled = False  # an item with a priority level came: fifos are ordered by level, then arrival

    def put(self, k: int, item: Item) -> None:
        """Queue `item` in bucket k: behind every item of its level or a higher one (a smaller
        number), ahead of the lower levels (Triton's priority levels; 0, none, ranks last)."""
        fifo = self.fifos[k]
        rank = item.level or _NO_LEVEL
        self.levelled |= bool(item.level)
        i = len(fifo)
        while self.levelled and i and (fifo[i - 1].level or _NO_LEVEL) > rank:
            i -= 1
        fifo.insert(i, item)

    def deadline(self, k: int, may_time_out: bool, switch_s: float = 0.0) -> float | None:
        """When bucket k becomes due: as soon as it is full, else when its oldest times out
        (if `may_time_out`), its Time_queue lengthened by the switch it needs."""
        fifo = self.fifos[k]
        if not fifo:
            return None
        batch_max = self.policy.buckets[k].batch_max
        if self.levelled:  # the oldest may queue behind newer items of higher levels
            oldest = min(item.arrival for item in fifo)
            return oldest if len(fifo) >= batch_max else oldest + self.time_queue[k] + switch_s if may_time_out else None
        if len(fifo) >= batch_max:
            return fifo[batch_max - 1].arrival
        return fifo[0].arrival + self.time_queue[k] + switch_s if may_time_out else None

    def neighbours(self, k: int, distance: int) -> list[int]:
        order = []
        for d in range(1, distance + 1):
            order += [j for j in (k - d, k + d) if 0 <= j < len(self.fifos)]
        return order


class PrebaBatcher:
    def __init__(self, models: Mapping[str, ModelBatching], vgpus: Mapping[str, str],
                 service_time: ServiceTime, merge_distance: int = 1,
                 short_batches_wait_for_idle: bool = True, slots: Mapping[str, int] | None = None,
                 switch_time: SwitchTime | None = None):
        """`vgpus` maps vGPU id -> kind; `merge_distance` is how many buckets away a short batch
        may borrow inputs from (1 = adjacent buckets only); `short_batches_wait_for_idle=False`
        places timed-out batches on busy vGPUs too; `switch_time`: see the module docstring."""
        self._pool = VgpuPlacement(vgpus, service_time, slots)
        self._models: dict[str, _ModelQueues] = {}
        for name, policy in models.items():
            self._add(name, policy)
        self._merge_distance = merge_distance
        self._short_wait = short_batches_wait_for_idle
        self._switch_time = switch_time
        self._pending = 0

    def _add(self, name: str, policy: ModelBatching) -> None:
        serving = list(policy.vgpus) if policy.vgpus is not None else self._pool.names
        unknown = set(serving) - set(self._pool.names)
        if unknown or not serving:
            raise ValueError(f"model {name!r}: vGPUs {sorted(unknown) or '[]'} are not in the pool")
        self._models[name] = _ModelQueues(policy, serving)

    def add_model(self, name: str, settings: ModelSettings) -> None:
        self.remove_model(name)  # refused while it has items queued
        self._add(name, settings.batching)

    def remove_model(self, name: str) -> None:
        queues = self._models.get(name)
        if queues is not None and any(queues.fifos):
            raise ValueError(f"model {name!r} still has items queued")
        self._models.pop(name, None)

    def time_queue(self, model: str, bucket: int) -> float:
        return self._models[model].time_queue[bucket]

    def add(self, item: Item, now: float) -> None:
        queues = self._models.get(item.model)
        if queues is None:
            raise ValueError(f"unknown model {item.model!r}")
        queues.put(queues.policy.bucket_of(item.length), item)
        queues.queued += 1
        self._pending += 1

    def poll(self, now: float) -> list[Dispatch]:
        out = []
        while True:
            due = [(d, name, k) for d, name, k in self._deadlines() if d <= now]
            if not due:
                return out
            if self._switch_time is not None:  # held models first (module docstring)
                _, name, k = min(due, key=lambda dnk: (self._switch_s(dnk[1]) > 0, dnk))
            else:
                _, name, k = min(due)
            out.append(self._dispatch(name, k, now))

    def next_deadline(self) -> float | None:
        return min((d for d, _, _ in self._deadlines()), default=None)

    def _deadlines(self) -> list[tuple[float, str, int]]:
        out = []
        for name, queues in self._models.items():
            if not queues.queued:  # (a poll comes with every arrival: most models have nothing queued)
                continue
            may_time_out = not self._short_wait or bool(self._pool.idle(queues.vgpus))
            switch_s = self._switch_s(name) if self._switch_time is not None else 0.0
            for k in range(len(queues.fifos)):
                if (d := queues.deadline(k, may_time_out, switch_s)) is not None:
                    out.append((d, name, k))
        return out

    def _switch_s(self, name: str) -> float:
        """The shortest switch a batch of `name` needs on the vGPUs serving it (0: one holds it)."""
        return min(self._switch_time(name, v) for v in self._models[name].vgpus)

    def on_complete(self, vgpu: str, now: float) -> None:
        self._pool.complete(vgpu, now)

    def pending(self) -> int:
        return self._pending

    def _dispatch(self, name: str, k: int, now: float) -> Dispatch:
        queues = self._models[name]
        buckets = queues.policy.buckets
        fifo = queues.fifos[k]
        items = [fifo.popleft() for _ in range(min(len(fifo), buckets[k].batch_max))]
        longest = k
        short = len(items) < buckets[k].batch_max
        for j in queues.neighbours(k, self._merge_distance) if short else ():
            source = queues.fifos[j]
            # the limit is the Batch_max of the longest input once this one joins
            while source and len(items) < buckets[max(longest, j)].batch_max:
                items.append(source.popleft())
                longest = max(longest, j)
        self._pending -= len(items)
        queues.queued -= len(items)
        pad_length = max(item.length for item in items)
        serving = queues.vgpus
        if self._switch_time is not None:
            holding = [v for v in serving if self._switch_time(name, v) == 0]
            serving = holding if self._pool.idle(holding) else serving
        vgpu = self._pool.place(name, len(items), pad_length, now, serving)
        return Dispatch(name, items, vgpu, longest, pad_length, buckets[longest].batch_max)
