"""The batcher registry: every batcher by name (`BATCHERS`), for the server and `atoll simulate`
alike. A kind builds its batcher from one `BatcherSettings`, says a model's largest batch under it,
and names the knobs it reads of a model (what `atoll simulate` reports); an unknown name gets an
error listing the choices. `VARIANTS` are settings of a kind compared by `atoll simulate` only."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from batching.api import Batcher, ModelSettings
from batching.buckets import ModelBatching
from batching.placement import ServiceTime
from batching.preba import PrebaBatcher, SwitchTime
from batching.static import StaticBatcher
from batching.triton import TritonBatcher, TritonConfig


@dataclass(frozen=True)
class BatcherSettings:
    """What batchers are built from; each kind reads its part. `policies`: PREBA's buckets per
    model; `triton`: a `TritonConfig` per model (models without one as the first, or, with none
    given, as `static_batch` and `static_timeout_s` say); `static_batch`, `static_timeout_s`: static
    batching's batch size and how long a partial batch waits; `short_batches_wait_for_idle`: see
    `PrebaBatcher`; `slots`: how many batches a vGPU runs at once (default 1); `switch_time`: what
    switching a model into a vGPU costs a batch (`preba.SwitchTime`, residency; PREBA reads it)."""

    policies: Mapping[str, ModelBatching] = field(default_factory=dict)
    triton: Mapping[str, TritonConfig] = field(default_factory=dict)
    static_batch: int | None = None
    static_timeout_s: float | None = None
    short_batches_wait_for_idle: bool = True
    slots: Mapping[str, int] | None = None
    switch_time: SwitchTime | None = None

    def triton_default(self) -> TritonConfig:
        """The Triton-style config of a model given none of its own."""
        first = next(iter(self.triton.values()), None)
        if first is not None:
            return first
        if self.static_batch is None:
            raise ValueError("the triton batcher needs a TritonConfig per model or a static_batch default")
        return TritonConfig(self.static_batch, round((self.static_timeout_s or 0.0) * 1e6))

    def static_size(self) -> int:
        if self.static_batch is None:
            raise ValueError("the static batcher needs a batch size")
        return self.static_batch


Build = Callable[[Mapping[str, str], ServiceTime, BatcherSettings], Batcher]


@dataclass(frozen=True)
class BatcherKind:
    build: Build  # (vGPU id -> kind, service time estimate, settings) -> the batcher
    largest_batch: Callable[[ModelSettings, BatcherSettings], int]
    knobs: Callable[[BatcherSettings, str, int], dict]  # (settings, model, vGPUs) -> what it reads
    description: str


def _preba(vgpus, service_time, s: BatcherSettings) -> Batcher:
    return PrebaBatcher(s.policies, vgpus, service_time,
                        short_batches_wait_for_idle=s.short_batches_wait_for_idle, slots=s.slots,
                        switch_time=s.switch_time)


def _preba_knobs(s: BatcherSettings, model: str, vgpus: int) -> dict:
    buckets = s.policies[model].buckets
    return {"batch_max": [b.batch_max for b in buckets],
            "time_queue_ms": [round(b.time_knee * 1e3 / vgpus, 4) for b in buckets]}


def _triton(vgpus, service_time, s: BatcherSettings) -> Batcher:
    first = s.triton_default()
    return TritonBatcher(vgpus, service_time, first.max_batch_size, first.max_queue_delay_microseconds,
                         first.preferred_batch_sizes, per_model=s.triton, slots=s.slots)


def _triton_knobs(s: BatcherSettings, model: str, vgpus: int) -> dict:
    config = s.triton.get(model) or s.triton_default()
    return {"max_batch_size": config.max_batch_size,
            "max_queue_delay_microseconds": config.max_queue_delay_microseconds}


def _static(vgpus, service_time, s: BatcherSettings) -> Batcher:
    return StaticBatcher(vgpus, service_time, s.static_size(), s.static_timeout_s, s.slots)


def _static_knobs(s: BatcherSettings, model: str, vgpus: int) -> dict:
    timeout = None if s.static_timeout_s is None else round(s.static_timeout_s * 1e3, 6)
    return {"batch_size": s.static_size(), "timeout_ms": timeout}


BATCHERS: dict[str, BatcherKind] = {
    "preba": BatcherKind(_preba, lambda m, s: max(b.batch_max for b in m.batching.buckets), _preba_knobs,
                         "PREBA: a FIFO per length bucket, Batch_max and Time_queue from knee profiles"),
    "triton": BatcherKind(_triton, lambda m, s: m.triton.max_batch_size, _triton_knobs,
                          "Triton-style: one queue per model, max batch size and max queue delay"),
    "static": BatcherKind(_static, lambda m, s: s.static_size(), _static_knobs,
                          "static: fixed batches, a partial one flushed after a timeout"),
}
DEFAULT_BATCHER = "preba"
# name -> (kind, settings it overrides)
VARIANTS: dict[str, tuple[str, dict]] = {
    "preba-eager": ("preba", {"short_batches_wait_for_idle": False}),  # timed-out batches to busy vGPUs too
}


def batcher_kind(name: str) -> BatcherKind:
    try:
        return BATCHERS[name]
    except KeyError:
        raise ValueError(f"unknown batcher {name!r}; choose from {', '.join(BATCHERS)}") from None


def make_batcher(kind: str, vgpus: Mapping[str, str], service_time: ServiceTime,
                 settings: BatcherSettings | None = None, **fields) -> Batcher:
    """The `kind` batcher over `vgpus` (vGPU id -> kind) with `service_time` estimating batch run
    times, built from `settings` or from `BatcherSettings(**fields)`. Models can be added later
    (`Batcher.add_model`)."""
    return batcher_kind(kind).build(vgpus, service_time, settings or BatcherSettings(**fields))


def variant(name: str, settings: BatcherSettings) -> tuple[BatcherKind, BatcherSettings]:
    """The kind of a batcher of `BATCHERS` or `VARIANTS`, and the settings it runs with."""
    kind, overrides = VARIANTS.get(name, (name, {}))
    return batcher_kind(kind), replace(settings, **overrides)
