"""The model zoo: seed models as ONNX graphs with deterministic random weights (no downloads).

MODELS is the registry (name -> entry); `build(name)` returns an onnx.ModelProto and
`write_repository` lays models out in Triton's model-repository format.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class ZooModel:
    name: str
    module: str
    kind: str  # "image" | "audio": the Atoll preprocessing pipeline that feeds it
    input_name: str
    input_dims: tuple[int, ...]  # without the batch dimension; -1 = dynamic (audio frames)
    output_name: str
    output_dims: tuple[int, ...]
    description: str
    max_batch_size: int = 32


MODELS: dict[str, ZooModel] = {
    m.name: m
    for m in [
        ZooModel("mobilenet_v3_small", "gpu_runtime.zoo.mobilenet_v3_small", "image", "input",
                 (3, 224, 224), "logits", (1000,), "MobileNetV3-small, torchvision layout"),
        ZooModel("squeezenet1_1", "gpu_runtime.zoo.squeezenet1_1", "image", "input",
                 (3, 224, 224), "logits", (1000,), "SqueezeNet 1.1, torchvision layout"),
        ZooModel("swin_t", "gpu_runtime.zoo.swin_t", "image", "input", (3, 224, 224), "logits",
                 (1000,), "Swin-T: patch 4, window 7, depths 2-2-6-2, dims 96-768, shifted windows"),
        ZooModel("conformer", "gpu_runtime.zoo.conformer", "audio", "features", (80, -1),
                 "log_probs", (-1, 128), "Conformer-S-like encoder + CTC head, 4x conv subsampling"),
        ZooModel("citrinet", "gpu_runtime.zoo.citrinet", "audio", "features", (80, -1),
                 "log_probs", (-1, 256), "CitriNet-256-like: 1-D separable conv blocks with SE, 8x"),
    ]
}


def build(name: str, **kwargs):
    if name not in MODELS:
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(MODELS)}")
    return importlib.import_module(MODELS[name].module).build(**kwargs)
