"""The one way to build a batcher by name, for the server and for `atoll simulate` alike."""

from __future__ import annotations

from collections.abc import Mapping

from batching.api import Batcher
from batching.buckets import ModelBatching
from batching.placement import ServiceTime
from batching.preba import PrebaBatcher
from batching.static import StaticBatcher
from batching.triton import TritonBatcher, TritonConfig

BATCHERS = ("preba", "triton", "static")


def make_batcher(kind: str, vgpus: Mapping[str, str], service_time: ServiceTime, *,
                 policies: Mapping[str, ModelBatching] | None = None,
                 triton: Mapping[str, TritonConfig] | None = None,
                 static_batch: int | None = None, static_timeout_s: float | None = None,
                 short_batches_wait_for_idle: bool = True, slots: Mapping[str, int] | None = None) -> Batcher:
    """`preba` batches by `policies` (per model: buckets, Batch_max, Time_knee); `triton` by one
    `TritonConfig` per model (models without one as the first, or with none given as `static_batch`
    and `static_timeout_s` say); `static` in batches of `static_batch`, flushing a partial one after
    `static_timeout_s`. Models can be added later (`Batcher.add_model`). `vgpus` maps vGPU id -> kind; `service_time` estimates batch run times;
    `slots` says how many batches a vGPU runs at once (default 1)."""
    if kind == "preba":
        return PrebaBatcher(policies or {}, vgpus, service_time,
                            short_batches_wait_for_idle=short_batches_wait_for_idle, slots=slots)  # fmt: skip
    if kind == "triton":
        first = next(iter(triton.values()), None) if triton else None
        if first is None:
            if static_batch is None:
                raise ValueError("the triton batcher needs a TritonConfig per model or a static_batch default")
            first = TritonConfig(static_batch, round((static_timeout_s or 0.0) * 1e6))
        return TritonBatcher(vgpus, service_time, first.max_batch_size, first.max_queue_delay_microseconds,
                             first.preferred_batch_sizes, per_model=triton, slots=slots)  # fmt: skip
    if kind == "static":
        if static_batch is None:
            raise ValueError("the static batcher needs a batch size")
        return StaticBatcher(vgpus, service_time, static_batch, static_timeout_s, slots)
    raise ValueError(f"unknown batcher {kind!r}; choose from {', '.join(BATCHERS)}")
