"""Synthesised knee profiles for A100 MIG slices, consistent with PREBA's published knees.

No A100 was measured. Latency follows a two-term model: a fixed cost per batch `a` (kernel launches,
reading the weights) plus per-input work that shares the slice's SMs,

    latency(b, L) = a + c_kind * b * w(L),   c_7g.40gb = c_1g.5gb / 7 (7x the SMs),

with w = 1 for images. Under the knee rule (doubling sizes: knee at the last b with
latency(2b) / latency(b) <= sqrt(2)) the knee is the power of two B with c*B*w in (0.71 a, 1.41 a],
so one per-model ratio c/a = 1/K fits both slices: K = PREBA's 1g.5gb knee gives that knee on
1g.5gb and 8x it on 7g.40gb (7K lands in (4K, 8K]). Published knees (PREBA, Yeo et al.,
arXiv:2411.19114, as quoted in the Atoll brief):
MobileNet 16 / 128, SqueezeNet 4 / 32, Swin 2 / 16 (1g.5gb / 7g.40gb).

Audio: w(L) is L seconds of input for CitriNet (convolutional, linear in length); for Conformer it
adds self-attention's quadratic term, L * (1 + L / 112.6): with d_model 256 and 40 ms frames, the
attention score FLOPs over T frames are ~2 T^2 d against ~22 T d^2 for the linear layers, a ratio of
T / 2816 frames = L / 112.6 s. `a` is set so that Time_knee stays near PREBA's ~35 ms for audio across
buckets, and c from a rough FLOP count (Conformer-M ~15 GFLOP per 10 s at ~13 TFLOP/s effective on a
1g.5gb slice: ~0.11 ms per input second). The vision `a` values are plausible batch-1 latencies on a
1g.5gb slice, not measurements.
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
