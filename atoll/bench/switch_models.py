"""The models `atoll bench switch` switches: chains of MatMul + Relu layers, each layer with weights
of its own (what residency moves layer group by layer group), generated with seeded random weights
into a Triton-layout repository (nothing downloaded)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CONFIG = """name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch}
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {width} ] }} ]
output [ {{ name: "{output}" data_type: TYPE_FP32 dims: [ {width} ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 1000 }}
"""


def output_name(layers: int) -> str:
    return f"r{layers}"


def mlp(path, seed: int, layers: int = 6, width: int = 128) -> str:
    """An ONNX model: x [N, width] through `layers` MatMul + Relu layers; returns its path."""
    rng = np.random.default_rng(seed)
    nodes, weights = [], []
    for i in range(layers):
        k = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        weights.append(numpy_helper.from_array(k, f"k{i}"))
        nodes.append(helper.make_node("MatMul", ["x" if i == 0 else f"r{i}", f"k{i}"], [f"h{i + 1}"]))
        nodes.append(helper.make_node("Relu", [f"h{i + 1}"], [f"r{i + 1}"]))
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
                              [helper.make_tensor_value_info(output_name(layers), TensorProto.FLOAT, ["N", width])],
                              weights)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


def repository(root: Path, names: list[str], layers: int, width: int, max_batch: int) -> dict[str, str]:
    """A model folder per name under `root`; returns each model's ONNX path."""
    paths = {}
    for seed, name in enumerate(names):
        (root / name / "1").mkdir(parents=True, exist_ok=True)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name, max_batch=max_batch, width=width,
                                                                output=output_name(layers)))
        paths[name] = mlp(root / name / "1" / "model.onnx", seed, layers, width)
    return paths
