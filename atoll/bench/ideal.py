"""PREBA's "Ideal": what the server's own vGPUs deliver when nothing but the executor runs.

For each model of the mix, on the vGPUs and executor `atoll serve` would use with the same
configuration: the knee (`atoll profile`'s measurement and `batching.knee`, p95 over batch sizes
on the first vGPU), then every vGPU kept busy with Batch_knee batches (two in flight each, so a
worker never waits for its next batch) for a few seconds: items per second, all vGPUs together.
The mix's ideal rate is the harmonic combination of the models' rates by their shares. Audio
models are measured at the 2.5 s bucket edge above the corpus's median clip.

It runs before the server starts, so the two never compete for the vGPUs.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time

from gpu_runtime.executors import resolve_executor
from gpu_runtime.vgpu.discovery import discover_vgpus
from gpu_runtime.vgpu.pool import WorkerPool

from atoll.bench.knee_profile import measure
from atoll.bench.slot_runs import SlotRunner, load_for_rows

BATCHES = (1, 2, 4, 8, 16, 32, 64)
BUCKET_S = 2.5
REPEATS = 20  # per batch size: the knee rule reads p95, which a few batches leave to chance


def mix_rate(shares: dict[str, float], rates: dict[str, float]) -> float:
    """Requests per second of a mix when each model alone serves `rates[model]`: the time per
    request is the share-weighted sum of each model's time per item."""
    return 1.0 / sum(share / rates[model] for model, share in shares.items() if share > 0)


def _saturate(runners: list, batch: int, length: float, seconds: float) -> float:
    """Items per second with each runner called back to back from its own thread."""
    done = [0] * len(runners)
    end = time.monotonic() + seconds

    def loop(i: int) -> None:
        while time.monotonic() < end:
            runners[i](batch, length)
            done[i] += batch

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(runners))]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.monotonic() - start)


def served_vgpus(config) -> list:
    """The vGPUs `atoll serve` finds with this configuration."""

    v = config.vgpus
    return discover_vgpus(v.mode, v.cpu_vgpus or None, v.green_context_sms or None)


def measure_ideal(config, models: dict, shares: dict[str, float], audio_median_s: float,
                  seconds: float = 5.0, progress: bool = True) -> dict:
    """{"ideal_rps", "executor", "vgpus", "per_model": {model: {batch_knee, time_knee_ms,
    latency_ms, length_s, items_per_s}}} for the mix `shares` ({model: share}) of `models`
    (ModelSpecs)."""

    vgpus = served_vgpus(config)
    executor = resolve_executor(config.vgpus.executor, vgpus)
    per_model = {}
    with WorkerPool(vgpus, executor=executor) as pool, contextlib.ExitStack() as runs:
        for name in shares:
            spec = models[name]
            audio = spec.preprocess == "audio"
            length = math.ceil(audio_median_s / BUCKET_S) * BUCKET_S if audio else None
            clips = [length] if audio else []
            max_batch = max(spec.max_batch_size, 1)
            out_row_bytes = load_for_rows(pool, spec, max_batch, clips)

            def runner(vgpu_id: str) -> SlotRunner:
                return runs.enter_context(contextlib.closing(
                    SlotRunner(pool, vgpu_id, spec, max_batch, clips, out_row_bytes)))  # fmt: skip

            batches = [b for b in BATCHES if b <= max_batch]
            profile = measure(runner(vgpus[0].id), name, "audio" if audio else "image",
                              clips, batches, repeats=REPEATS, warmup=2, percentile=95,
                              progress=progress)  # fmt: skip
            knee = profile.buckets[0]
            runners = [runner(info.id) for info in vgpus for _ in range(2)]
            per_model[name] = {
                "batch_knee": knee.batch_knee, "time_knee_ms": round(knee.time_knee_ms, 3),
                "latency_ms": {b: round(v, 3) for b, v in knee.latency_ms.items()}, "length_s": length,
                "items_per_s": round(_saturate(runners, knee.batch_knee, length or 1.0, seconds), 2),
            }  # fmt: skip
    return {"ideal_rps": round(mix_rate(shares, {m: r["items_per_s"] for m, r in per_model.items()}), 2),
            "executor": executor, "vgpus": [info.id for info in vgpus], "per_model": per_model}
