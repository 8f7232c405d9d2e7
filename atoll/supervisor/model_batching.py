"""How the supervisor batches each model: the configured batcher over the server's vGPUs, each
model's PREBA bucket policy (from the knee profile or its config), its Triton-style config and its
largest batch, and the plans the dispatcher and workers follow."""

from __future__ import annotations

import dataclasses
import logging
import math

from batching import (
    BatcherSettings,
    BucketPolicy,
    ModelBatching,
    ModelSettings,
    TritonConfig,
    audio_bucket_edges,
    image_model,
    make_batcher,
)
from batching.factory import batcher_kind
from batching.knee import COST_FLOOR
from batching.profile import load_profile, shipped_profile
from gpu_runtime.vgpu.messages import BatchSpec, SequenceControl, SequenceSpec, SequenceStateSpec
from gpu_runtime.vgpu.slots import row_layout

from atoll.config import Config
from atoll.kserve.datatypes import DTYPES
from atoll.repository.specs import ModelSpec
from atoll.repository.versions import model_of
from atoll.supervisor import lengths
from atoll.supervisor.dispatcher import ModelPlan

log = logging.getLogger(__name__)


def _clamped(policy, max_batch: int):
    """A profiled policy with Batch_max capped at the model's own max_batch_size."""
    buckets = tuple(BucketPolicy(b.max_length, min(b.batch_max, max_batch), b.time_knee)
                    for b in policy.buckets)  # fmt: skip
    return ModelBatching(policy.modality, buckets, policy.vgpus)


def batch_max_default(config: Config, kinds) -> int:
    """[batching] max_batch_size, or its default for these vGPU kinds: Batch_max for models that no
    profile covers, and the largest batch of the Triton-style and static baselines. 4 on CPU vGPUs,
    a guess at where a model's per-input CPU cost stops falling (profiled models take theirs from
    batching/profiles/cpu.json: docs/batching-scheduling.md); else 8."""
    return config.batching.max_batch_size or (4 if set(kinds) == {"cpu"} else 8)


def preba_policies(config: Config, models: dict[str, ModelSpec], profile=None, batch_default: int = 8):
    """PREBA bucket policies per model. From the knee profile where it has the model (Batch_max =
    Batch_knee, Time_knee per bucket); otherwise Batch_max and Time_knee from the model's config (or
    the [batching] defaults, `batch_default` for Batch_max) for every bucket, audio bucketed by
    2.5 s up to the longest clip. A CPU profile's (the cost floor's) Time_knee is capped by that
    delay: on a CPU vGPU batches form while it is busy (a short batch waits for an idle one), so its
    time-out only holds an input back while the vGPU idles (docs/batching-scheduling.md); so is any
    profile's for a model configured without `dynamic_batching`. Where no profile covers a model,
    its largest `preferred_batch_size` is Batch_max: a batch of that size goes at once, as Triton's
    does (docs/models.md, "Batching as the config says")."""
    b = config.batching
    policies = {}
    for name, spec in models.items():
        batch_max = min(b.max_batch_size or batch_default, max(spec.max_batch_size, 1))
        if spec.preferred_batch_sizes:
            batch_max = min(max(spec.preferred_batch_sizes), max(spec.max_batch_size, 1))
        time_knee = queue_delay_us(config, spec) * 1e-6
        if profile is not None and name in profile.models:
            policy = _clamped(profile.model_batching(name), max(spec.max_batch_size, 1))
            if profile.models[name].rule == COST_FLOOR or not spec.dynamic_batching:
                policy = dataclasses.replace(policy, buckets=tuple(
                    dataclasses.replace(k, time_knee=min(k.time_knee, time_knee)) for k in policy.buckets))
            policies[name] = policy
            continue
        if spec.preprocess == "audio":
            edges = audio_bucket_edges(config.preprocessing.max_audio_seconds)
            buckets = tuple(BucketPolicy(edge, batch_max, time_knee) for edge in edges)
            policies[name] = ModelBatching("audio", buckets)
        else:
            policies[name] = image_model(batch_max, time_knee)
    return policies


def queue_delay_us(config: Config, spec: ModelSpec) -> int:
    """How long a request of `spec` may wait for others, as its config says (Triton's model
    configuration, "Delayed Batching"): no `dynamic_batching` at all, none (each request runs as it
    comes, as Triton's default scheduler runs it); its `max_queue_delay_microseconds` where set, 0
    included; else the server's `[batching] max_queue_delay_microseconds`."""
    if not spec.dynamic_batching:
        return 0
    if spec.max_queue_delay_microseconds is not None:
        return spec.max_queue_delay_microseconds
    return config.batching.max_queue_delay_microseconds


def triton_configs(config: Config, models: dict[str, ModelSpec], batch_max: int) -> dict[str, TritonConfig]:
    """The Triton-style baseline's settings per model: its config.pbtxt, capped by `batch_max`."""
    return {
        name: TritonConfig(
            max_batch_size=min(batch_max, max(spec.max_batch_size, 1)),
            max_queue_delay_microseconds=queue_delay_us(config, spec),
            preferred_batch_sizes=tuple(p for p in spec.preferred_batch_sizes if p <= batch_max),
        )
        for name, spec in models.items()
    }


class Batching:
    """The configured batcher over the server's vGPUs ({id: profile kind}, running `slots` batches
    at once), and how it batches each model: its PREBA policy, its Triton-style config and its
    largest batch. Service times come from the knee profile (`batching.profile`) where it covers a
    model, else from measured batches (`latency`); `switch_time`: residency's (`preba.SwitchTime`)."""

    def __init__(self, config: Config, vgpus: dict[str, str], latency, slots: dict[str, int] | None = None,
                 switch_time=None):
        b = config.batching
        self.config = config
        # Without a configured profile, the one shipped for these vGPUs (batching/profiles/) if any.
        path = b.profile or shipped_profile(dict.fromkeys(vgpus.values()))
        self.profile = load_profile(path) if path else None
        if self.profile is not None and self.profile.kind not in vgpus.values():
            log.warning("profile %s is for %r vGPUs; serving on %s", path, self.profile.kind,
                        sorted(set(vgpus.values())))  # fmt: skip

        def service_time(model: str, batch: int, length: float, kind: str) -> float:
            name = model_of(model)  # the batcher knows each served version; the profile, models
            if self.profile is not None and name in self.profile.models:
                return self.profile.service_time(name, batch, length)
            return latency(model, batch, length, kind)

        self.batch_max = batch_max_default(config, vgpus.values())
        self.batcher = make_batcher(b.batcher, vgpus, service_time, static_batch=self.batch_max,
                                    static_timeout_s=b.max_queue_delay_microseconds * 1e-6, slots=slots,
                                    switch_time=switch_time)  # fmt: skip

    def settings(self, spec: ModelSpec, vgpus: tuple[str, ...] | None = None) -> tuple[ModelSettings, int]:
        """How `spec` is batched, and its largest batch under the configured batcher; `vgpus`: the
        only vGPUs it runs on (its `instance_group`), None for every one."""
        models = {spec.name: spec}
        policy = preba_policies(self.config, models, self.profile, self.batch_max)[spec.name]
        if vgpus is not None:
            policy = dataclasses.replace(policy, vgpus=vgpus)
        triton = triton_configs(self.config, models, self.batch_max)[spec.name]
        largest = batcher_kind(self.config.batching.batcher).largest_batch(
            ModelSettings(policy, triton), BatcherSettings(static_batch=self.batch_max))
        return ModelSettings(policy, triton), largest


def batcher_for(config: Config, models: dict[str, ModelSpec], vgpus: dict[str, str], latency,
                slots: dict[str, int] | None = None):
    """`Batching`'s batcher serving `models`, with each model's PREBA policy and largest batch."""
    batching = Batching(config, vgpus, latency, slots)
    policies, largest = {}, {}
    for name, spec in models.items():
        settings, largest[name] = batching.settings(spec)
        batching.batcher.add_model(name, settings)
        policies[name] = settings.batching
    return batching.batcher, policies, largest


def plan_for(spec: ModelSpec, policy: ModelBatching, max_batch: int) -> ModelPlan:
    if spec.sequence is not None:  # its batches are the sequence batcher's, up to max_batch_size
        return ModelPlan(spec.name, spec.version, max(spec.max_batch_size, 1), None, equal_shapes=not spec.pad_dynamic,
                         sequence=spec.sequence, vgpus=policy.vgpus)  # fmt: skip
    if not spec.padded:
        return ModelPlan(spec.name, spec.version, max_batch if spec.max_batch_size > 0 else 1, None,
                         equal_shapes=not spec.pad_dynamic, queues=spec.queue_policies, vgpus=policy.vgpus)  # fmt: skip
    dims = spec.inputs[0].dims
    frame_axis = dims.index(-1) if -1 in dims else None
    padded_frames = tuple(lengths.frames(b.max_length) for b in policy.buckets) if frame_axis is not None else ()
    return ModelPlan(spec.name, spec.version, max_batch, frame_axis, padded_frames, queues=spec.queue_policies,
                     vgpus=policy.vgpus)  # fmt: skip


def batch_spec(spec: ModelSpec) -> BatchSpec:
    outputs = {t.name: tuple(t.model_dims) for t in spec.outputs}
    first = spec.inputs[0]
    if spec.padded:
        return BatchSpec(first.name, tuple(first.dims), outputs)
    fields, _ = row_layout(spec.row_fields(), spec.dim_bound, spec.bytes_room)
    reshaped = {t.name: t.reshape for t in spec.inputs if t.reshape is not None and -1 not in t.reshape}
    warmups = tuple((w.batch_size, w.count, tuple((name, reshaped.get(name, dims), kind) for name, dims, kind in w.inputs))
                    for w in spec.warmups)  # the samples as the model takes them (a scalar for dims [1])
    return BatchSpec(first.name, tuple(first.model_dims), outputs, fields[0].dtype.name, fields,
                     spec.max_batch_size > 0, warmups, spec.pad_dynamic, _sequence_spec(spec))  # fmt: skip


def _sequence_spec(spec: ModelSpec) -> SequenceSpec | None:
    """What the worker fills in for a stateful model (gpu_runtime.vgpu.sequence_state)."""
    if spec.sequence is None:
        return None
    return SequenceSpec(
        tuple(SequenceControl(c.kind, c.input_name, DTYPES[c.datatype], c.false_true) for c in spec.sequence.controls),
        tuple(SequenceStateSpec(s.input_name, s.output_name, DTYPES[s.datatype], s.dims) for s in spec.sequence.states))


def row_bytes(spec: ModelSpec, plan: ModelPlan) -> int:
    """The bytes of one slot row: the padded input at its longest, or every input at its largest."""
    if spec.padded:
        frames = plan.padded_frames[-1] if plan.padded_frames else None
        return 4 * math.prod(frames if d == -1 else d for d in spec.inputs[0].dims)
    return row_layout(spec.row_fields(), spec.dim_bound, spec.bytes_room)[1]


def output_row_bytes(spec: ModelSpec, measured: int) -> int:
    """The bytes of one slot row's outputs: as `measured` at load for a padded model (each of its
    lengths ran); for any other also room for every output at its largest (a -1 at `atoll.max_dim`,
    a BYTES output `atoll.max_bytes`), since nothing runs at its largest shapes at load."""
    if spec.padded:
        return measured
    fields = [(t.name, t.dims, DTYPES[t.datatype]) for t in spec.outputs]
    return max(measured, row_layout(fields, spec.dim_bound, spec.bytes_room)[1])
