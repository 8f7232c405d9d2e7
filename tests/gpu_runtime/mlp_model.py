"""A chain of MatMul + Relu layers, each with its own weights (what residency moves group by group)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.gpu_runtime.chain_model import save


def mlp(path, seed: int, layers: int = 6, width: int = 128) -> str:
    rng = np.random.default_rng(seed)
    nodes, weights = [], []
    for i in range(layers):
        k = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        weights.append(numpy_helper.from_array(k, f"k{i}"))
        nodes.append(helper.make_node("MatMul", ["x" if i == 0 else f"r{i}", f"k{i}"], [f"h{i + 1}"]))
        nodes.append(helper.make_node("Relu", [f"h{i + 1}"], [f"r{i + 1}"]))
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
                              [helper.make_tensor_value_info(f"r{layers}", TensorProto.FLOAT, ["N", width])],
                              weights)  # fmt: skip
    return save(graph, path)
