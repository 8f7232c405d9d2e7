"""A model's inputs, outputs and batching completed from its ONNX graph, as Triton does without
`--strict-model-config`, and a config that contradicts the graph refused with both sides named.

Batching: a graph whose every input and output has a dynamic first dimension can batch. A config
that sets no `max_batch_size` then gets Triton's default for auto-completed models (its
`--backend-config=default-max-batch-size`, 4), unless the inputs it lists already have the graph's
full rank (they then describe whole tensors: `max_batch_size` 0). A config without inputs (or
without outputs) gets all of the graph's; one that lists them must match the graph: every listed
tensor in the graph, in its datatype, with its rank, each dimension equal or dynamic (-1) in the
graph, and every graph input listed (a config may list a subset of the outputs). A tensor with
`reshape` is matched by its reshape's shape, the one the model takes or gives.

Scalars: a tensor with no dimensions left (rank 0, or a batched model's rank-1 `[batch]`) gets
`dims: [1]` and `reshape: { shape: [ ] }`, as Triton's ONNX Runtime backend completes it (every
input and output must have non-empty dims, so the protocol sees `[1]`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto

DEFAULT_MAX_BATCH_SIZE = 4  # Triton's default-max-batch-size for auto-completed configs

ONNX_TYPES = {
    TensorProto.BOOL: "BOOL", TensorProto.UINT8: "UINT8", TensorProto.UINT16: "UINT16",
    TensorProto.UINT32: "UINT32", TensorProto.UINT64: "UINT64", TensorProto.INT8: "INT8",
    TensorProto.INT16: "INT16", TensorProto.INT32: "INT32", TensorProto.INT64: "INT64",
    TensorProto.FLOAT16: "FP16", TensorProto.BFLOAT16: "BF16", TensorProto.FLOAT: "FP32",
    TensorProto.DOUBLE: "FP64", TensorProto.STRING: "BYTES",
}  # fmt: skip


class GraphError(ValueError):
    """The graph cannot be read, or the config contradicts it."""


@dataclass(frozen=True)
class GraphTensor:
    name: str
    datatype: str  # protocol name, e.g. FP32
    shape: tuple[int, ...] | None  # the whole tensor's; -1 = dynamic; None: the graph does not say


@dataclass(frozen=True)
class Completed:
    max_batch_size: int
    inputs: list  # of (name, datatype, dims without the batch dimension, reshape: the model's dims or None)
    outputs: list


def graph_tensors(path: Path) -> tuple[list[GraphTensor], list[GraphTensor]]:
    """The graph's inputs (initializers excluded) and outputs."""
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, OSError, ValueError) as exc:  # the file is not a model, or cannot be read
        raise GraphError(f"{path.name} is not a readable ONNX model ({type(exc).__name__}: {exc})") from None
    graph = model.graph
    weights = {t.name for t in graph.initializer}
    inputs = [_tensor(v) for v in graph.input if v.name not in weights]
    outputs = [_tensor(v) for v in graph.output]
    if not outputs:
        raise GraphError(f"{path.name}: the graph has no outputs")
    return inputs, outputs


def _tensor(value: onnx.ValueInfoProto) -> GraphTensor:
    kind = value.type.tensor_type
    if value.type.WhichOneof("value") != "tensor_type" or kind.elem_type not in ONNX_TYPES:
        raise GraphError(f"graph tensor '{value.name}' is of a type Atoll does not serve "
                         f"({onnx.helper.printable_type(value.type)})")  # fmt: skip
    shape = None
    if kind.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in kind.shape.dim)
    return GraphTensor(value.name, ONNX_TYPES[kind.elem_type], shape)


def complete(model: str, declared_batch: int | None, inputs: list, outputs: list,
             graph: tuple[list[GraphTensor], list[GraphTensor]]) -> Completed:
    """`inputs`/`outputs`: the config's (name, datatype, dims, reshape or None) entries, empty where
    it lists none; `declared_batch`: its max_batch_size, None where it sets none."""
    graph_in, graph_out = graph
    batchable = all(t.shape is not None and t.shape[:1] == (-1,) for t in graph_in + graph_out)
    if declared_batch is None:
        whole = inputs and all(
            g.shape is not None and len(dims if reshape is None else reshape) == len(g.shape)
            for (name, _, dims, reshape) in inputs for g in graph_in if g.name == name)  # fmt: skip
        declared_batch = DEFAULT_MAX_BATCH_SIZE if batchable and not whole else 0
    batched = declared_batch > 0
    if batched and not batchable:
        first = next(t for t in graph_in + graph_out if t.shape is None or t.shape[:1] != (-1,))
        shape = "no shape" if first.shape is None else f"shape {list(first.shape)}"
        raise GraphError(f"{model}: config.pbtxt says max_batch_size {declared_batch}, but the graph's "
                         f"'{first.name}' has {shape}: no dynamic batch dimension first")  # fmt: skip
    return Completed(declared_batch, _match(model, "input", inputs, graph_in, batched, every=True),
                     _match(model, "output", outputs, graph_out, batched, every=False))  # fmt: skip


def _match(model: str, what: str, declared: list, graph: list[GraphTensor], batched: bool, every: bool) -> list:
    def dims_of(g: GraphTensor) -> tuple[int, ...] | None:
        return None if g.shape is None else g.shape[1:] if batched else g.shape

    if not declared:
        unknown = [g.name for g in graph if g.shape is None]
        if unknown:
            raise GraphError(f"{model}: the graph does not give the shape of {', '.join(unknown)}; "
                             f"list its {what}s in config.pbtxt")  # fmt: skip
        return [(g.name, g.datatype, *_scalar_as_one(dims_of(g))) for g in graph]
    by_name = {g.name: g for g in graph}
    for name, datatype, dims, reshape in declared:
        g = by_name.get(name)
        if g is None:
            raise GraphError(f"{model}: config.pbtxt {what} '{name}' is not in the graph, whose {what}s are "
                             f"{', '.join(by_name) or 'none'}")  # fmt: skip
        if datatype != g.datatype:
            raise GraphError(f"{model}: {what} '{name}' is {datatype} in config.pbtxt but {g.datatype} "
                             "in the graph")  # fmt: skip
        theirs, ours = dims_of(g), tuple(dims if reshape is None else reshape)
        if theirs is not None and not _fits(ours, theirs):
            where = " (after the batch dimension)" if batched else ""
            field = "dims" if reshape is None else "reshape"
            raise GraphError(f"{model}: {what} '{name}' has {field} {list(ours)} in config.pbtxt but "
                             f"{list(theirs)}{where} in the graph")  # fmt: skip
    missing = [g.name for g in graph if g.name not in {name for name, *_ in declared}]
    if every and missing:
        raise GraphError(f"{model}: graph {what}(s) {', '.join(missing)} not listed in config.pbtxt")
    return list(declared)


def _scalar_as_one(dims: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """A completed tensor's dims and reshape: a scalar's dims are [1], reshaped to []."""
    return ((1,), ()) if dims == () else (dims, None)


def _fits(config: tuple[int, ...], graph: tuple[int, ...]) -> bool:
    """The config's dims name the graph's: same rank, each equal, or any where the graph's is dynamic."""
    return len(config) == len(graph) and all(g == -1 or c == g for c, g in zip(config, graph))
