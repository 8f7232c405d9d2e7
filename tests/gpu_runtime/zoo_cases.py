"""Shared helpers for the gpu_runtime tests: cached zoo models, seeded inputs, onnxruntime runs."""

from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort

from gpu_runtime.zoo import MODELS, build

# (model, batch, audio length in frames or None); audio models at two lengths
CASES = [
    ("mobilenet_v3_small", 1, None), ("mobilenet_v3_small", 4, None),
    ("squeezenet1_1", 1, None), ("squeezenet1_1", 4, None),
    ("swin_t", 1, None), ("swin_t", 4, None),
    ("conformer", 1, 200), ("conformer", 4, 333),
    ("citrinet", 1, 200), ("citrinet", 4, 333),
]


@functools.cache
def zoo_model(name: str):
    return build(name)


def input_for(name: str, batch: int, length: int | None) -> dict[str, np.ndarray]:
    entry = MODELS[name]
    shape = (batch,) + tuple(length if d == -1 else d for d in entry.input_dims)
    x = np.random.default_rng(1234).standard_normal(shape).astype(np.float32)
    return {entry.input_name: x}


@functools.cache
def _session(name: str) -> ort.InferenceSession:
    return ort.InferenceSession(zoo_model(name).SerializeToString(),
                                providers=["CPUExecutionProvider"])


def onnxruntime_outputs(name: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = _session(name)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))
