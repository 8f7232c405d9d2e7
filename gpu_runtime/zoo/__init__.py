"""The model zoo: seed models as ONNX graphs with deterministic random weights (no downloads).

MODELS is the registry (name -> entry); `build(name)` returns an onnx.ModelProto and
`write_repository` lays models out in Triton's model-repository format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnx

from gpu_runtime.zoo import citrinet, conformer, mobilenet_v3_small, squeezenet1_1, swin_t


@dataclass(frozen=True)
class ZooModel:
    name: str
    builder: Callable[..., onnx.ModelProto]  # its module's build(**kwargs)
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
        ZooModel("mobilenet_v3_small", mobilenet_v3_small.build, "image", "input",
                 (3, 224, 224), "logits", (1000,), "MobileNetV3-small, torchvision layout"),
        ZooModel("squeezenet1_1", squeezenet1_1.build, "image", "input",
                 (3, 224, 224), "logits", (1000,), "SqueezeNet 1.1, torchvision layout"),
        ZooModel("swin_t", swin_t.build, "image", "input", (3, 224, 224), "logits",
                 (1000,), "Swin-T: patch 4, window 7, depths 2-2-6-2, dims 96-768, shifted windows"),
        ZooModel("conformer", conformer.build, "audio", "features", (80, -1),
                 "log_probs", (-1, 128), "Conformer-S-like encoder + CTC head, 4x conv subsampling"),
        ZooModel("citrinet", citrinet.build, "audio", "features", (80, -1),
                 "log_probs", (-1, 256), "CitriNet-256-like: 1-D separable conv blocks with SE, 8x"),
    ]
}


def build(name: str, **kwargs):
    if name not in MODELS:
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name].builder(**kwargs)
