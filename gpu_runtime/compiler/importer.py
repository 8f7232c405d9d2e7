"""ONNX (opset 17+) -> kernel Program for one batch size (and one input length for audio).

Shapes are static per program, so everything that depends only on shapes and initializers
(Shape, Gather on shapes, Unsqueeze, Constant, mask arithmetic, ...) is folded at import time by
onnx's reference evaluator. What remains is lowered by `compiler.lowering` (one module per op
family) into launches over buffers: layout ops become views, BatchNormalization folds into the
preceding Conv, and activations, scales and residual adds into the kernel that feeds them.

`precision` "fp16" stores activations and weights in fp16 (kernels accumulate in fp32, GEMMs on
tensor cores); graph inputs and outputs stay float32 buffers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from gpu_runtime.compiler.graph import GraphContext, ProgramBuilder, Tensor, UnsupportedModelError, Value, attrs_of
from gpu_runtime.compiler.lowering import LOWERINGS
from gpu_runtime.compiler.lowering.common import materialize_view
from gpu_runtime.program import Program

PRECISIONS = {"fp32": "float32", "fp16": "float16"}


def _fold(node: onnx.NodeProto, inputs: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    feeds = {name: arr for name, arr in zip(node.input, inputs) if name}
    return ReferenceEvaluator(node, opsets={"": opset}).run(None, feeds)


def _static_dims(value_info, batch: int, length: int | None) -> tuple[int, ...]:
    dims = []
    for i, d in enumerate(value_info.type.tensor_type.shape.dim):
        if d.HasField("dim_value"):
            dims.append(d.dim_value)
        elif i == 0:
            dims.append(batch)
        elif length is not None:
            dims.append(length)
        else:
            raise UnsupportedModelError(
                f"input {value_info.name!r} has a dynamic dimension {i} ({d.dim_param or '?'}); "
                "give its length")
    return tuple(dims)


RESTORE_WINDOW = 4  # REEF keeps 2-4 kernels outstanding per stream


def missing_operators(model: onnx.ModelProto) -> tuple[str, ...]:
    """The operators no lowering implements among those `import_model` lowers, sorted (another
    domain's as `domain.op`): what keeps the model off the kernel runtime (it then runs on
    onnxruntime). Nodes it folds are not counted: a Shape (every shape is static in a program) and
    any node whose inputs are all known at import (weights, constants, shapes and what follows
    from them alone, such as an attention mask computed from constants)."""
    known = {init.name for init in model.graph.initializer} | {""}
    missing = set()
    for node in model.graph.node:
        if node.domain in ("", "ai.onnx") and (node.op_type == "Shape" or all(i in known for i in node.input)):
            known.update(node.output)
        elif (op := _operator(node)) not in LOWERINGS:
            missing.add(op)
    return tuple(sorted(missing))


def _operator(node: onnx.NodeProto) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def import_model(model: onnx.ModelProto | str | Path, batch: int = 1,
                 length: int | None = None, name: str | None = None,
                 restore_window: int = RESTORE_WINDOW, precision: str = "fp32") -> Program:
    """Lowers `model` for `batch` (the first dim of every input) and `length` (any other
    dynamic input dim, e.g. audio frames) at `precision` ("fp32" or "fp16"). Any of the last
    `restore_window` launches may be re-run after later ones without reading overwritten
    inputs."""
    if precision not in PRECISIONS:
        raise UnsupportedModelError(f"precision {precision!r}; choose from {', '.join(PRECISIONS)}")
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 13:
        raise UnsupportedModelError(f"opset {opset} is too old (need 13+, ideally 17)")
    graph = model.graph
    builder = ProgramBuilder(name or graph.name or "model", batch, PRECISIONS[precision])
    values: dict[str, Value] = {"": None}
    for init in graph.initializer:
        values[init.name] = numpy_helper.to_array(init)
    inputs: dict[str, Tensor] = {}
    for vi in graph.input:
        if vi.name in values:
            continue
        if vi.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
            raise UnsupportedModelError(f"input {vi.name!r}: only float32 inputs are supported")
        inputs[vi.name] = values[vi.name] = builder.tensor(
            _static_dims(vi, batch, length), "input", vi.name, "float32")
    ctx = GraphContext(builder, graph, values, materialize_view)
    for node in graph.node:
        if id(node) in ctx.fused:
            continue
        if node.domain not in ("", "ai.onnx"):
            raise UnsupportedModelError(
                f"node {node.name!r}: op {node.domain}.{node.op_type} is not supported")
        ins = [values[i] if i else None for i in node.input]
        missing = [i for i, v in zip(node.input, ins) if i and i not in values]
        if missing:
            raise UnsupportedModelError(f"node {node.name!r}: inputs {missing} are not defined")
        if node.op_type == "Shape" and not isinstance(ins[0], np.ndarray):
            a = attrs_of(node)
            outs = [np.array(ins[0].shape[a.get("start", 0):a.get("end", None)], np.int64)]
        elif all(v is None or isinstance(v, np.ndarray) for v in ins):
            outs = _fold(node, ins, opset)
        else:
            lower = LOWERINGS.get(node.op_type)
            if lower is None:
                raise UnsupportedModelError(
                    f"node {node.name!r}: op {node.op_type} is not supported")
            try:
                outs = lower(ctx, node, ins, attrs_of(node))
            except UnsupportedModelError as e:
                raise UnsupportedModelError(f"node {node.name!r} ({node.op_type}): {e}") from None
        for out_name, v in zip(node.output, outs):
            if out_name:
                values[out_name] = v
    outputs = {}
    for vo in graph.output:
        v = values[vo.name]
        if isinstance(v, np.ndarray):
            raise UnsupportedModelError(f"output {vo.name!r} is a constant; nothing to compute")
        outputs[vo.name] = ctx.tensor(v, vo.name, "float32")
    return builder.finish(inputs, outputs, restore_window)
