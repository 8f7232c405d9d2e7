"""BF16 graph inputs and outputs for onnxruntime, whose Python binding takes and gives no bfloat16
arrays (ml_dtypes' bfloat16 is a NumPy type it does not know).

The graph is given FP32 inputs and outputs in their place, under names of their own, with a Cast to
BF16 after each input and from BF16 before each output; the executor widens BF16 arrays to FP32
before a run and narrows its results back. Both conversions are exact (every BF16 value is an FP32
value, and the FP32 results were BF16 values), so the outputs are bit for bit what the graph makes.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper

SUFFIX = ":atoll_fp32"  # the FP32 stand-in's name: no ONNX exporter writes a colon and this word


@dataclass(frozen=True)
class Bf16Io:
    model: bytes  # the graph with FP32 stand-ins, serialised for onnxruntime
    inputs: frozenset[str]  # the BF16 inputs and outputs, by their names in the original graph
    outputs: frozenset[str]

    def feeds(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name + SUFFIX if name in self.inputs else name: array.astype(np.float32) if name in self.inputs
                else array for name, array in inputs.items()}  # fmt: skip

    def output_name(self, name: str) -> str:
        return name + SUFFIX if name in self.outputs else name

    def result(self, name: str, array: np.ndarray) -> np.ndarray:
        return array.astype(ml_dtypes.bfloat16) if name in self.outputs else array


def bf16_io(path) -> Bf16Io | None:
    """The graph at `path` with FP32 stand-ins for its BF16 inputs and outputs; None where it has none."""
    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    weights = {t.name for t in graph.initializer}
    inputs = [v for v in graph.input if v.name not in weights and v.type.tensor_type.elem_type == TensorProto.BFLOAT16]
    outputs = [v for v in graph.output if v.type.tensor_type.elem_type == TensorProto.BFLOAT16]
    if not inputs and not outputs:
        return None
    model = onnx.load(str(path))  # with its weights: the session is made from these bytes
    graph = model.graph
    casts = []
    for value in graph.input:
        if value.name in {v.name for v in inputs}:
            casts.append(helper.make_node("Cast", [value.name + SUFFIX], [value.name], to=TensorProto.BFLOAT16))
            value.name += SUFFIX
            value.type.tensor_type.elem_type = TensorProto.FLOAT
    nodes = casts + list(graph.node)  # (a repeated field takes no slice assignment)
    del graph.node[:]
    graph.node.extend(nodes)
    for value in graph.output:
        if value.name in {v.name for v in outputs}:
            graph.node.append(helper.make_node("Cast", [value.name], [value.name + SUFFIX], to=TensorProto.FLOAT))
            value.name += SUFFIX
            value.type.tensor_type.elem_type = TensorProto.FLOAT
    return Bf16Io(model.SerializeToString(), frozenset(v.name for v in inputs), frozenset(v.name for v in outputs))
