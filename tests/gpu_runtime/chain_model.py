"""A slow ONNX model for tests that need a batch to be running while others arrive: a chain of
MatMuls (x @ k, 24 times; hundreds of ms for a few hundred rows of 768)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(graph, path) -> str:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return str(path)


def matmul_chain(path, rng: np.random.Generator, layers: int = 24, width: int = 768) -> str:
    k = rng.standard_normal((width, width)).astype(np.float32) / np.float32(np.sqrt(width))
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", "k"], [f"h{i + 1}"])
             for i in range(layers)]  # fmt: skip
    graph = helper.make_graph(
        nodes, "slow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info(f"h{layers}", TensorProto.FLOAT, ["N", width])],
        [numpy_helper.from_array(k, "k")],
    )  # fmt: skip
    return save(graph, path)
