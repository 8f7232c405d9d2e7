"""The traffic of `atoll bench serve`: classes (model x priority), their shares, and every request
body, encoded once from the media corpus before any load runs.

`media` requests carry the JPEG or WAV file; `tensor` requests carry what the CPU path makes of the
same file (`fpga_host.cpu_backend`), as ready FP32 inputs: the same work minus the preprocessing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from fpga_host import cpu_backend

from atoll.bench.bodies import media_bytes
from atoll.bench.corpus import JPEG_SETS, jpeg_bytes, synthetic_wav
from atoll.bench.loadproc import Request
from atoll.front_end.media import read_wav

INPUTS = ("media", "tensor")
IMAGES_PER_SET = 20
CLIPS = 8
CLIP_SECONDS = (1.0, 8.0)  # uniform, as the demo sends


@dataclass(frozen=True)
class Traffic:
    classes: tuple[str, ...]  # "<model>/<rt|be>"
    requests: tuple[Request, ...]
    weights: tuple[float, ...]


def parse_mix(text: str | None, models: dict) -> dict[str, float]:
    """"a=0.8,b=0.2" -> {model: share} summing to 1; None -> the first image model alone."""
    if not text:
        image = [n for n, s in models.items() if s.preprocess == "image"]
        if not image:
            raise ValueError("no image model in the repository: give --mix")
        return {image[0]: 1.0}
    mix = {}
    for item in text.split(","):
        name, _, share = item.partition("=")
        name = name.strip()
        if name not in models:
            raise ValueError(f"--mix: no model {name!r} in the repository (has {', '.join(models)})")
        if models[name].preprocess == "none":
            raise ValueError(f"--mix: {name!r} takes no JPEG/WAV input")
        try:
            mix[name] = float(share) if share else 1.0
        except ValueError:
            raise ValueError(f"--mix: share of {name!r} is not a number: {share!r}") from None
    total = sum(mix.values())
    if total <= 0 or min(mix.values()) < 0:
        raise ValueError("--mix: shares must be >= 0 and not all 0")
    return {name: share / total for name, share in mix.items()}


class Media:
    """The files each model is sent, made once per bench run and shared by every configuration."""

    def __init__(self, images: str, seed: int):
        sizes = JPEG_SETS[images]
        self.jpegs = [jpeg_bytes(*sizes[i % len(sizes)], seed=seed + i) for i in range(IMAGES_PER_SET)]
        rng = np.random.default_rng(seed)
        seconds = rng.uniform(*CLIP_SECONDS, CLIPS)
        self.wavs = [synthetic_wav(rng, float(s)) for s in seconds]
        self.median_clip_s = float(np.median(seconds))  # the ideal run measures audio models there

    def files(self, kind: str) -> list[bytes]:
        return self.jpegs if kind == "image" else self.wavs


def _tensor(kind: str, data: bytes) -> np.ndarray:
    if kind == "image":
        return cpu_backend.image(data)[None]
    return cpu_backend.audio(*read_wav(data))[None]


def build(models: dict, mix: dict[str, float], rt_share: float, media: Media, input_kind: str) -> Traffic:
    classes, requests, weights = [], [], []
    for name, share in mix.items():
        spec = models[name]
        files = media.files(spec.preprocess)
        if input_kind == "media":
            inputs = [(spec.raw_input, "BYTES", (1, 1), media_bytes([f])) for f in files]
        else:
            tensors = [_tensor(spec.preprocess, f) for f in files]
            inputs = [(spec.inputs[0].name, "FP32", t.shape, t.astype("<f4").tobytes()) for t in tensors]
        for priority, label, part in ((0, "be", 1.0 - rt_share), (1, "rt", rt_share)):
            if share * part <= 0:
                continue
            cls = len(classes)
            classes.append(f"{name}/{label}")
            for input_name, datatype, shape, data in inputs:
                requests.append(Request(cls, name, input_name, datatype, tuple(shape), data, priority))
                weights.append(share * part / len(inputs))
    return Traffic(tuple(classes), tuple(requests), tuple(weights))


def weights_of(traffic: Traffic, priority: str) -> tuple[float, ...]:
    """The traffic's weights with every class but `priority`'s ("rt" or "be") left out."""
    keep = {i for i, name in enumerate(traffic.classes) if name.endswith(f"/{priority}")}
    return tuple(w if r.cls in keep else 0.0 for w, r in zip(traffic.weights, traffic.requests))
