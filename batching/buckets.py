"""Per-model bucket policies: length edges, Batch_max and Time_knee per bucket."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

# PREBA buckets audio by 2.5 s of input: bucket k holds lengths in (2.5 k, 2.5 (k + 1)].
AUDIO_BUCKET_S = 2.5
MODALITIES = ("audio", "image")


@dataclass(frozen=True)
class BucketPolicy:
    # inclusive upper edge of the bucket in seconds (inf for the single image bucket)
    max_length: float
    # profiled Batch_knee for (model, vGPU kind, bucket)
    batch_max: int
    # tail latency at Batch_knee, seconds
    time_knee: float


@dataclass(frozen=True)
class ModelBatching:
    modality: str
    buckets: tuple[BucketPolicy, ...]
    # vGPUs serving the model; None means every vGPU of the batcher
    vgpus: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.modality not in MODALITIES:
            raise ValueError(f"modality must be one of {MODALITIES}, not {self.modality!r}")
        if not self.buckets:
            raise ValueError("a model needs at least one bucket")
        if self.modality == "image" and len(self.buckets) != 1:
            raise ValueError("image models have exactly one bucket")
        edges = [b.max_length for b in self.buckets]
        if any(b <= a for a, b in zip(edges, edges[1:])):
            raise ValueError(f"bucket edges must increase: {edges}")
        for b in self.buckets:
            if b.batch_max < 1 or not b.time_knee >= 0:  # 0: a batch goes as soon as a vGPU is idle
                raise ValueError(f"bucket {b}: batch_max must be >= 1 and time_knee >= 0")

    def bucket_of(self, length: float) -> int:
        """Index of the bucket holding `length`; ValueError past the longest profiled bucket."""
        if self.modality == "image":
            return 0
        k = bisect.bisect_left([b.max_length for b in self.buckets], length)
        if k == len(self.buckets):
            raise ValueError(
                f"input length {length:g} s exceeds the longest profiled bucket "
                f"({self.buckets[-1].max_length:g} s)"
            )
        return k


def audio_bucket_edges(longest_s: float) -> list[float]:
    """Upper edges 2.5, 5, ... of the audio buckets needed to hold inputs up to `longest_s`."""
    n = max(1, math.ceil(longest_s / AUDIO_BUCKET_S - 1e-9))
    return [AUDIO_BUCKET_S * (k + 1) for k in range(n)]


def image_model(batch_max: int, time_knee: float, vgpus: Sequence[str] | None = None) -> ModelBatching:
    return ModelBatching("image", (BucketPolicy(math.inf, batch_max, time_knee),),
                         tuple(vgpus) if vgpus is not None else None)
