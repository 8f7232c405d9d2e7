"""User models as a Triton user brings them, built with `onnx.helper` (nothing downloaded), and a
repository writer for them: the graphs of issue #30's acceptance and their config.pbtxt files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

OPSET = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=OPSET)
    model.ir_version = 8  # onnxruntime's oldest supported is far below; newer ones may not load everywhere
    onnx.checker.check_model(model)
    return model


def value(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def simple() -> onnx.ModelProto:
    """Triton's QA model `simple`: INPUT0, INPUT1 INT32 [batch, 16] -> OUTPUT0 sum, OUTPUT1 difference."""
    return _model([helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
                   helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
                  [value("INPUT0", TensorProto.INT32, ["batch", 16]), value("INPUT1", TensorProto.INT32, ["batch", 16])],
                  [value("OUTPUT0", TensorProto.INT32, ["batch", 16]), value("OUTPUT1", TensorProto.INT32, ["batch", 16])])  # fmt: skip


def fp32_pair() -> onnx.ModelProto:
    """One FP32 input [batch, 16] -> y = x + 1, z = 2 x."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    return _model([helper.make_node("Add", ["x", "one"], ["y"]), helper.make_node("Mul", ["x", "two"], ["z"])],
                  [value("x", TensorProto.FLOAT, ["batch", 16])],
                  [value("y", TensorProto.FLOAT, ["batch", 16]), value("z", TensorProto.FLOAT, ["batch", 16])],
                  [one, two])  # fmt: skip


def bert() -> onnx.ModelProto:
    """BERT-shaped: input_ids, attention_mask, token_type_ids INT64 [batch, seq] -> start_logits,
    end_logits FP32 [batch, seq] (a stand-in arithmetic on the three, per position)."""
    nodes = [helper.make_node("Cast", ["input_ids"], ["ids"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["token_type_ids"], ["types"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["ids", "mask"], ["start_logits"]),
             helper.make_node("Sub", ["ids", "types"], ["end_logits"])]  # fmt: skip
    names = ("input_ids", "attention_mask", "token_type_ids")
    return _model(nodes, [value(n, TensorProto.INT64, ["batch", "seq"]) for n in names],
                  [value(n, TensorProto.FLOAT, ["batch", "seq"]) for n in ("start_logits", "end_logits")])


def half() -> onnx.ModelProto:
    """FP16 in and out: y = x * x, [batch, 8]."""
    return _model([helper.make_node("Mul", ["x", "x"], ["y"])], [value("x", TensorProto.FLOAT16, ["batch", 8])],
                  [value("y", TensorProto.FLOAT16, ["batch", 8])])


def masked() -> onnx.ModelProto:
    """BOOL and UINT8 inputs: y = where(mask, pixels, 0) as UINT8, [batch, 6]."""
    zero = helper.make_tensor("zero", TensorProto.UINT8, [], [0])
    return _model([helper.make_node("Where", ["mask", "pixels", "zero"], ["y"])],
                  [value("mask", TensorProto.BOOL, ["batch", 6]), value("pixels", TensorProto.UINT8, ["batch", 6])],
                  [value("y", TensorProto.UINT8, ["batch", 6])], [zero])  # fmt: skip


def unbatched() -> onnx.ModelProto:
    """No batch dimension (max_batch_size 0): x FP32 [4, 16] -> row sums [4] and the transpose [16, 4]."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    return _model([helper.make_node("ReduceSum", ["x", "axes"], ["sums"], keepdims=0),
                   helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0])],
                  [value("x", TensorProto.FLOAT, [4, 16])],
                  [value("sums", TensorProto.FLOAT, [4]), value("t", TensorProto.FLOAT, [16, 4])], [axes])  # fmt: skip


def words() -> onnx.ModelProto:
    """A BYTES (string) input: text [batch, 3] -> ids INT64 [batch, 3] (a category lookup, -1 unknown)."""
    lookup = helper.make_node("CategoryMapper", ["text"], ["ids"], domain="ai.onnx.ml", default_int64=-1,
                              cats_strings=["cat", "dog", "\u00e9mu"], cats_int64s=[1, 2, 3])  # fmt: skip
    return _model([lookup], [value("text", TensorProto.STRING, ["batch", 3])],
                  [value("ids", TensorProto.INT64, ["batch", 3])])


def signature(inputs: dict, outputs: dict) -> onnx.ModelProto:
    """A graph declaring these inputs and outputs ({name: (elem type, shape)}), for tests of what the
    repository reads from a graph: it is never run (each output is a Cast of the first input)."""
    first = next(iter(inputs))
    nodes = [helper.make_node("Cast", [first], [name], to=elem) for name, (elem, _) in outputs.items()]
    return _model(nodes, [value(n, e, s) for n, (e, s) in inputs.items()],
                  [value(n, e, s) for n, (e, s) in outputs.items()])


SIMPLE_CONFIG = """name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""
SIMPLE_WARMUP = """model_warmup [ {
  name: "pair" batch_size: 2 count: 3
  inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
  inputs { key: "INPUT1" value: { data_type: TYPE_INT32 dims: [ 16 ] random_data: true } }
} ]
"""
FP32_PAIR_CONFIG = """name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "z" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""


def write(root: Path, name: str, model: onnx.ModelProto | bytes, config: str | None) -> Path:
    """`<root>/<name>/1/model.onnx` and, unless `config` is None, its config.pbtxt (`{name}` filled)."""
    folder = root / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    data = model if isinstance(model, bytes) else model.SerializeToString()
    (folder / "1" / "model.onnx").write_bytes(data)
    if config is not None:
        (folder / "config.pbtxt").write_text(config.replace("{name}", name))
    return folder


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime's outputs for `feeds`, by output name (BYTES given as bytes: fed as UTF-8 text)."""
    feeds = {k: np.vectorize(bytes.decode, otypes=[object])(v) if v.dtype.kind == "S" else v
             for k, v in feeds.items()}  # fmt: skip
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))
