"""Synthesised knee profiles for A100 MIG slices, consistent with PREBA's published knees.

No A100 was measured. Latency is a fixed cost per batch plus per-input work sharing the slice's SMs,

    latency(b, L) = a + c_kind * b * w(L),   c_7g.40gb = c_1g.5gb / 7 (7x the SMs),

with w = 1 for images, w(L) = L for CitriNet and L * (1 + L / 112.6) for Conformer (attention's
quadratic term). Under the knee rule one ratio c/a = 1/K per model gives PREBA's 1g.5gb knee K there
and 8K on 7g.40gb. The derivation, the published knees and where `a` and c come from:
docs/batching-scheduling.md.
"""

from __future__ import annotations

from batching.buckets import audio_bucket_edges
from batching.knee import knee
from batching.profile import BucketProfile, ModelProfile, Profile

KINDS = {"a100-1g.5gb": 1.0, "a100-7g.40gb": 7.0}  # kind -> compute relative to a 1g.5gb slice
BATCH_SIZES = tuple(2**i for i in range(9))  # 1 .. 256
LONGEST_AUDIO_S = 35.0

# model -> (fixed cost a in ms, per-input cost c on 1g.5gb in ms per unit of w)
VISION = {
    "mobilenet_v3_small": (2.0, 2.0 / 16),
    "squeezenet1_1": (1.6, 1.6 / 4),
    "swin_t": (9.0, 9.0 / 2),
}
AUDIO = {
    "conformer": (17.0, 0.11),
    "citrinet": (15.0, 0.08),
}
ATTENTION_SPAN_S = 112.6

SOURCE = (
    "Synthesised, not measured: latency = a + c*b*w(L) with c scaled by slice size, parameters chosen "
    "to reproduce the Batch_knee values published in PREBA (Yeo, Kim, Choi, Rhu; arXiv:2411.19114) for "
    "MobileNet/SqueezeNet/Swin on A100 1g.5gb and 7g.40gb, and its ~35 ms audio Time_knee. "
    "See batching/paper_profiles.py."
)


def work(model: str, length_s: float | None) -> float:
    if length_s is None:
        return 1.0
    if model == "conformer":
        return length_s * (1.0 + length_s / ATTENTION_SPAN_S)
    return length_s


def _bucket(model: str, a: float, c: float, length_s: float | None) -> BucketProfile:
    latency = {b: a + c * b * work(model, length_s) for b in BATCH_SIZES}
    batch_knee, time_knee = knee(latency)
    return BucketProfile(length_s, batch_knee, time_knee, latency)


def paper_profile(kind: str) -> Profile:
    scale = KINDS[kind]
    models = {
        name: ModelProfile("image", (_bucket(name, a, c / scale, None),))
        for name, (a, c) in VISION.items()
    }
    for name, (a, c) in AUDIO.items():
        models[name] = ModelProfile(
            "audio",
            tuple(_bucket(name, a, c / scale, L) for L in audio_bucket_edges(LONGEST_AUDIO_S)),
        )
    return Profile(kind, SOURCE, models)
