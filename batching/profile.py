"""Knee profiles: JSON files of tail latency over batch size (and input length) per vGPU kind.

Format (see batching/README.md):
    {"kind": "cpu", "source": "how the numbers were obtained", "tail_percentile": 95,
     "models": {"citrinet": {"modality": "audio", "rule": "cost-floor", "source": "...", "buckets": [
         {"length_s": 2.5, "batch_knee": 4, "time_knee_ms": 35.0, "latency_ms": {"1": 17.3, ...},
          "cpu_ms_per_input": {"1": 9.1, ...}}, ...]}}}
An audio bucket's `length_s` is its upper edge (inputs are profiled at that length); an image model
has one bucket with `length_s` null. Every bucket of a model profiles the same batch sizes. A
model's `rule` (batching.knee.RULES) made its Batch_max; without one it is the latency knee.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batching.buckets import MODALITIES, BucketPolicy, ModelBatching
from batching.knee import COST_FLOOR, RULES
from batching.placement import ServiceTime


class ProfileError(ValueError):
    """A profile file that cannot be used, with where and why."""


@dataclass(frozen=True)
class BucketProfile:
    length_s: float | None
    batch_knee: int
    time_knee_ms: float
    latency_ms: dict[int, float]
    cpu_ms_per_input: dict[int, float] | None = None  # the executor's CPU time per batch / batch size


@dataclass(frozen=True)
class ModelProfile:
    modality: str
    buckets: tuple[BucketProfile, ...]
    rule: str | None = None  # which batching.knee rule made Batch_max; None: not recorded (the knee)
    source: str | None = None  # how this model's numbers were obtained, where it differs by model

    def batch_sizes(self) -> list[int]:
        return sorted(self.buckets[0].latency_ms)

    def latency_grid_ms(self) -> np.ndarray:
        """Tail latency, one row per bucket, one column per batch size."""
        sizes = self.batch_sizes()
        return np.array([[b.latency_ms[s] for s in sizes] for b in self.buckets], dtype=np.float64)


@dataclass(frozen=True)
class Profile:
    kind: str
    source: str
    models: dict[str, ModelProfile]
    tail_percentile: float = 95.0

    def model(self, name: str) -> ModelProfile:
        if name not in self.models:
            raise ProfileError(f"profile for {self.kind!r} has no model {name!r} "
                               f"(it has {', '.join(sorted(self.models))})")
        return self.models[name]

    def model_batching(self, name: str, vgpus: Sequence[str] | None = None) -> ModelBatching:
        """PREBA's policy for `name` on this vGPU kind: Batch_max = Batch_knee per bucket."""
        m = self.model(name)
        buckets = tuple(
            BucketPolicy(math.inf if b.length_s is None else b.length_s, b.batch_knee,
                         b.time_knee_ms / 1000.0)
            for b in m.buckets
        )
        return ModelBatching(m.modality, buckets, tuple(vgpus) if vgpus is not None else None)

    def service_time(self, name: str, batch: int, length: float) -> float:
        """Seconds to run a batch padded to `length`: bilinear in (batch, length) over the profile,
        extrapolated linearly past the largest batch and longest length, clamped below them."""
        m = self.model(name)
        per_bucket = _interp_rows(batch, m.batch_sizes(), m.latency_grid_ms())
        if m.modality == "image":
            return float(per_bucket[0]) / 1000.0
        lengths = [b.length_s for b in m.buckets]
        return float(_interp_rows(length, lengths, per_bucket[None, :])[0]) / 1000.0

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "source": self.source,
            "tail_percentile": self.tail_percentile,
            "models": {name: _model_json(m) for name, m in self.models.items()},
        }


def _model_json(m: ModelProfile) -> dict:
    """A model's JSON; the fields older profiles lack are written only where set."""
    out: dict = {"modality": m.modality}
    out.update({key: value for key, value in (("rule", m.rule), ("source", m.source)) if value is not None})
    out["buckets"] = [
        {"length_s": b.length_s, "batch_knee": b.batch_knee, "time_knee_ms": round(b.time_knee_ms, 4),
         "latency_ms": _ms_json(b.latency_ms),
         **({} if b.cpu_ms_per_input is None else {"cpu_ms_per_input": _ms_json(b.cpu_ms_per_input)})}
        for b in m.buckets
    ]
    return out


def _ms_json(values: dict[int, float]) -> dict[str, float]:
    return {str(s): round(v, 4) for s, v in sorted(values.items())}


def _interp_rows(x: float, xs: Sequence[float], rows: np.ndarray) -> np.ndarray:
    xs = np.asarray(xs, dtype=np.float64)
    if len(xs) == 1:
        return rows[:, 0]
    x = max(x, xs[0])
    i = min(int(np.searchsorted(xs, x, side="right")) - 1, len(xs) - 2)
    w = (x - xs[i]) / (xs[i + 1] - xs[i])
    return rows[:, i] + w * (rows[:, i + 1] - rows[:, i])


def service_time_from(profiles: Mapping[str, Profile]) -> ServiceTime:
    """A batcher's `service_time(model, batch, length, vgpu_kind)` over profiles keyed by kind."""

    def service_time(model: str, batch: int, length: float, kind: str) -> float:
        if kind not in profiles:
            raise ProfileError(f"no profile for vGPU kind {kind!r}")
        return profiles[kind].service_time(model, batch, length)

    return service_time


SHIPPED = Path(__file__).with_name("profiles")  # <vGPU kind>.json, measured or synthesised


def shipped_profile(kinds) -> Path | None:
    """The shipped knee profile for the first of these vGPU kinds that has one (each file says
    whether it was measured), or None."""
    return next((SHIPPED / f"{kind}.json" for kind in kinds if (SHIPPED / f"{kind}.json").is_file()),
                None)


def load_profile(path: str | Path) -> Profile:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ProfileError(f"cannot read profile {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ProfileError(f"profile {path} is not valid JSON: {e}") from None
    return parse_profile(data, str(path))


def save_profile(profile: Profile, path: str | Path) -> None:
    Path(path).write_text(json.dumps(profile.to_json(), indent=1) + "\n")


def parse_profile(data: object, where: str = "profile") -> Profile:
    def fail(at: str, why: str) -> ProfileError:
        return ProfileError(f"{where}: {at}: {why}")

    if not isinstance(data, dict):
        raise fail("top level", "must be a JSON object")
    for key, kind in (("kind", str), ("source", str), ("models", dict)):
        if not isinstance(data.get(key), kind):
            raise fail(key, f"missing or not a {'string' if kind is str else 'object'}")
    if not data["models"]:
        raise fail("models", "is empty")
    tail = data.get("tail_percentile", 95.0)
    if not isinstance(tail, (int, float)) or not 0 < tail <= 100:
        raise fail("tail_percentile", "must be a number in (0, 100]")
    models = {name: _parse_model(m, f"models.{name}", fail) for name, m in data["models"].items()}
    return Profile(data["kind"], data["source"], models, float(tail))


def _parse_model(m: object, at: str, fail) -> ModelProfile:
    if not isinstance(m, dict):
        raise fail(at, "must be an object")
    modality = m.get("modality")
    if modality not in MODALITIES:
        raise fail(f"{at}.modality", f"must be one of {MODALITIES}")
    raw = m.get("buckets")
    if not isinstance(raw, list) or not raw:
        raise fail(f"{at}.buckets", "missing or empty")
    buckets = tuple(_parse_bucket(b, f"{at}.buckets[{i}]", modality, fail) for i, b in enumerate(raw))
    if modality == "image" and len(buckets) != 1:
        raise fail(f"{at}.buckets", "an image model has exactly one bucket")
    lengths = [b.length_s for b in buckets]
    if modality == "audio" and any(b <= a for a, b in zip(lengths, lengths[1:])):
        raise fail(f"{at}.buckets", f"length_s must increase, got {lengths}")
    sizes = sorted(buckets[0].latency_ms)
    for i, b in enumerate(buckets):
        if sorted(b.latency_ms) != sizes:
            raise fail(f"{at}.buckets[{i}].latency_ms", "must profile the same batch sizes as bucket 0")
    rule = m.get("rule")
    if rule is not None and rule not in RULES:
        raise fail(f"{at}.rule", f"must be one of {RULES}")
    if rule == COST_FLOOR and any(b.cpu_ms_per_input is None for b in buckets):
        raise fail(f"{at}.buckets", f"the {COST_FLOOR} rule needs cpu_ms_per_input in every bucket")
    source = m.get("source")
    if source is not None and not isinstance(source, str):
        raise fail(f"{at}.source", "must be a string")
    return ModelProfile(modality, buckets, rule, source)


def _parse_bucket(b: object, at: str, modality: str, fail) -> BucketProfile:
    if not isinstance(b, dict):
        raise fail(at, "must be an object")
    length = b.get("length_s")
    if modality == "image" and length is not None:
        raise fail(f"{at}.length_s", "must be null for an image model")
    if modality == "audio" and (not isinstance(length, (int, float)) or not length > 0):
        raise fail(f"{at}.length_s", "must be a positive number of seconds")
    latency = _parse_ms(b.get("latency_ms"), f"{at}.latency_ms", fail)
    cpu = None
    if b.get("cpu_ms_per_input") is not None:
        cpu = _parse_ms(b["cpu_ms_per_input"], f"{at}.cpu_ms_per_input", fail)
        if sorted(cpu) != sorted(latency):
            raise fail(f"{at}.cpu_ms_per_input", "must cover the batch sizes of latency_ms")
    knee = b.get("batch_knee")
    if not isinstance(knee, int) or knee not in latency:
        raise fail(f"{at}.batch_knee", f"{knee!r} is not one of the profiled batch sizes")
    time_knee = b.get("time_knee_ms")
    if not isinstance(time_knee, (int, float)) or not time_knee > 0:
        raise fail(f"{at}.time_knee_ms", "must be a positive number of ms")
    return BucketProfile(None if length is None else float(length), knee, float(time_knee), latency, cpu)


def _parse_ms(raw: object, at: str, fail) -> dict[int, float]:
    """{batch size: positive ms} from its JSON object."""
    if not isinstance(raw, dict) or not raw:
        raise fail(at, "missing or empty")
    values = {}
    for key, value in raw.items():
        if not key.isdigit() or int(key) < 1:
            raise fail(at, f"batch size {key!r} is not a positive integer")
        if not isinstance(value, (int, float)) or not value > 0:
            raise fail(f"{at}[{key}]", "must be a positive number of ms")
        values[int(key)] = float(value)
    return values
