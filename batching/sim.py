"""Discrete-event simulation of a batcher feeding vGPUs, on simulated time.

The batcher is the same object the server runs. Each vGPU runs the batches placed on it one at a
time in placement order, each for `service_time(model, batch, pad_length, kind)` seconds (the
profile's tail latency, so the figures are conservative). Events at equal times are handled
completions first, then arrivals, then `poll()`; after the last arrival the run continues until
every accepted item has completed, and only items arriving after `warmup` count in the latencies.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from batching.api import Batcher, Dispatch, Item
from batching.placement import ServiceTime


@dataclass
class SimResult:
    offered_rps: float
    throughput_rps: float
    latency_ms: dict[str, float]
    mean_batch_size: float
    vgpu_utilisation: float
    completed: int
    batches: int

    def to_json(self) -> dict:
        return {
            "offered_rps": round(self.offered_rps, 3),
            "throughput_rps": round(self.throughput_rps, 3),
            "latency_ms": {k: round(v, 3) for k, v in self.latency_ms.items()},
            "mean_batch_size": round(self.mean_batch_size, 3),
            "vgpu_utilisation": round(self.vgpu_utilisation, 4),
            "completed": self.completed,
            "batches": self.batches,
        }


def simulate(batcher: Batcher, model: str, arrivals: np.ndarray, lengths: np.ndarray,
             vgpus: Mapping[str, str], service_time: ServiceTime, duration: float,
             warmup: float = 0.0) -> SimResult:
    """Run `arrivals` (sorted times in [0, duration)) with `lengths` through `batcher`."""
    if len(arrivals) != len(lengths):
        raise ValueError("arrivals and lengths differ in size")
    done_at = np.full(len(arrivals), np.nan)
    queues: dict[str, deque[tuple[Dispatch, float]]] = {name: deque() for name in vgpus}
    completions: list[tuple[float, str]] = []  # (time, vGPU) of each running batch
    busy = 0.0  # vGPU-seconds spent inside [0, duration]
    batch_sizes = []

    def start(name: str, now: float) -> None:
        nonlocal busy
        _, run = queues[name][0]
        end = now + run
        busy += max(0.0, min(end, duration) - min(now, duration))
        heapq.heappush(completions, (end, name))

    now, i, n = 0.0, 0, len(arrivals)
    while True:
        deadline = batcher.next_deadline()
        t = min(arrivals[i] if i < n else math.inf,
                completions[0][0] if completions else math.inf,
                math.inf if deadline is None else max(deadline, now))
        if t == math.inf:
            break
        now = t
        while completions and completions[0][0] <= now:
            _, name = heapq.heappop(completions)
            dispatch, _ = queues[name].popleft()
            done_at[[item.id for item in dispatch.items]] = now
            batcher.on_complete(name, now)
            if queues[name]:
                start(name, now)
        while i < n and arrivals[i] <= now:
            batcher.add(Item(i, model, float(lengths[i]), float(arrivals[i])), now)
            i += 1
        for dispatch in batcher.poll(now):
            batch_sizes.append(len(dispatch.items))
            queue = queues[dispatch.vgpu]
            queue.append((dispatch, service_time(dispatch.model, len(dispatch.items),
                                                 dispatch.pad_length, vgpus[dispatch.vgpu])))
            if len(queue) == 1:
                start(dispatch.vgpu, now)
        if deadline is not None and deadline <= now and batcher.next_deadline() == deadline:
            raise RuntimeError(f"batcher did not act on its own deadline {deadline}")
    if batcher.pending():
        raise RuntimeError(f"simulation ended with {batcher.pending()} items never dispatched")

    measured = arrivals >= warmup
    latency = (done_at[measured] - arrivals[measured]) * 1e3
    window = duration - warmup
    finished = np.count_nonzero(measured & (done_at <= duration))
    p50, p95, p99 = np.percentile(latency, [50, 95, 99]) if latency.size else (math.nan,) * 3
    mean = float(latency.mean()) if latency.size else math.nan
    return SimResult(
        offered_rps=n / duration,
        throughput_rps=finished / window,
        latency_ms={"mean": mean, "p50": float(p50), "p95": float(p95), "p99": float(p99)},
        mean_batch_size=float(np.mean(batch_sizes)) if batch_sizes else 0.0,
        vgpu_utilisation=busy / (duration * len(vgpus)),
        completed=int(np.count_nonzero(~np.isnan(done_at))),
        batches=len(batch_sizes),
    )
