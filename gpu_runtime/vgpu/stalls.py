"""Stalls: a worker with batches in flight that has said nothing for `stall_s` (or four times its
slowest batch) is stalled: not ready until it answers, and never killed, since it may only be slow."""

from __future__ import annotations

import logging

from gpu_runtime.vgpu.worker_handle import WorkerHandle

log = logging.getLogger(__name__)

STALL_FLOOR_S = 5.0
STALL_FACTOR = 4  # times a worker's slowest batch: the least silence that makes it stalled


def stall_deadline(worker: WorkerHandle, floor_s: float) -> float | None:
    """When `worker` counts as stalled if it stays silent; None while nothing is in flight."""
    if worker.conn is None or not worker.state.inflight_runs:
        return None
    return worker.heard + max(floor_s, STALL_FACTOR * worker.slowest_batch)


def note_stalls(workers, now: float, floor_s: float) -> tuple[bool, list[float]]:
    """Mark workers whose stall deadline has passed (the pool's lock held): whether any newly is,
    and the deadlines still to come. A stalled worker has none left to wake for (its past one would
    keep the monitor spinning)."""
    newly, upcoming = False, []
    for worker in workers:
        deadline = stall_deadline(worker, floor_s)
        if deadline is None or worker.state.stalled:
            continue
        if deadline > now:
            upcoming.append(deadline)
            continue
        worker.state.stalled = newly = True
        log.warning("vGPU %s: no word for %.1f s with %d batch(es) in flight; its models count as not ready "
                    "until it answers", worker.state.info.id, now - worker.heard,
                    worker.state.inflight_runs)  # fmt: skip
    return newly, upcoming
