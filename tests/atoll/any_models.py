"""Models as real trained ones are, built with `onnx.helper` (nothing downloaded): the graphs of
issue #42's acceptance, each reproducing what kept such a model from loading or answering, and
Triton's QA models `simple_string`, `simple_identity` and `simple_int8` as ONNX graphs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from tests.atoll.user_models import _model, value


def heights() -> onnx.ModelProto:
    """Valid for some heights only: x FP32 [batch, h, 4] plus the first h rows of a 64-row table
    (h <= 64), regrouped in pairs of rows (h even) -> y [batch, h / 2, 8]. Neither the smallest (1)
    nor the largest (1024) height runs."""
    table = helper.make_tensor("table", TensorProto.FLOAT, [64, 4], np.arange(256, dtype=np.float32) / 64)
    const = {n: helper.make_tensor(n, TensorProto.INT64, [len(v)], v)
             for n, v in (("zero", [0]), ("one", [1]), ("two", [2]), ("pairs", [0, -1, 8]))}  # fmt: skip
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Slice", ["shape", "one", "two"], ["h"]),
             helper.make_node("Slice", ["table", "zero", "h", "zero"], ["rows"]),  # min(h, 64) rows
             helper.make_node("Add", ["x", "rows"], ["sum"]),
             helper.make_node("Reshape", ["sum", "pairs"], ["y"])]  # fmt: skip
    return _model(nodes, [value("x", TensorProto.FLOAT, ["batch", "h", 4])],
                  [value("y", TensorProto.FLOAT, ["batch", None, 8])], [table, *const.values()])  # fmt: skip


def window() -> onnx.ModelProto:
    """A scalar INT64 input with an `If` on its value, unbatched: audio FP32 [n] framed into windows
    of `size` samples when size > 0 (n a multiple of it), else one frame -> frames FP32 [-1, -1]
    (two variable dimensions) and size squared, a scalar INT64."""
    zero = helper.make_tensor("zero", TensorProto.INT64, [], [0])
    minus_one = helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1])
    one_row = helper.make_tensor("one_row", TensorProto.INT64, [2], [1, -1])
    size_1d = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    framed = helper.make_graph(
        [helper.make_node("Unsqueeze", ["size", "axes"], ["size_1d"]),
         helper.make_node("Concat", ["minus_one", "size_1d"], ["frame_shape"], axis=0),
         helper.make_node("Reshape", ["audio", "frame_shape"], ["framed"])],
        "framed", [], [value("framed", TensorProto.FLOAT, [None, None])])  # fmt: skip
    whole = helper.make_graph([helper.make_node("Reshape", ["audio", "one_row"], ["whole"])], "whole", [],
                              [value("whole", TensorProto.FLOAT, [None, None])])  # fmt: skip
    nodes = [helper.make_node("Greater", ["size", "zero"], ["positive"]),
             helper.make_node("If", ["positive"], ["frames"], then_branch=framed, else_branch=whole),
             helper.make_node("Mul", ["size", "size"], ["squared"])]  # fmt: skip
    return _model(nodes, [value("audio", TensorProto.FLOAT, ["n"]), value("size", TensorProto.INT64, [])],
                  [value("frames", TensorProto.FLOAT, ["rows", "cols"]), value("squared", TensorProto.INT64, [])],
                  [zero, minus_one, one_row, size_1d])  # fmt: skip


def heatmap() -> onnx.ModelProto:
    """A detector's heat map: image FP32 [batch, 1, h, w] -> heat [batch, 1, h, w] = 2 image + 1."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    return _model([helper.make_node("Mul", ["image", "two"], ["twice"]), helper.make_node("Add", ["twice", "one"], ["heat"])],
                  [value("image", TensorProto.FLOAT, ["batch", 1, "h", "w"])],
                  [value("heat", TensorProto.FLOAT, ["batch", 1, "h", "w"])], [two, one])  # fmt: skip


def _pair(elem: int, compute: int | None = None) -> onnx.ModelProto:
    """Triton's QA `simple` shape: INPUT0, INPUT1 [batch, 16] -> OUTPUT0 sum, OUTPUT1 difference, in
    `elem`; computed in `compute` (strings are numbers as text) where given."""
    nodes, a, b = [], "INPUT0", "INPUT1"
    if compute is not None:
        nodes = [helper.make_node("Cast", ["INPUT0"], ["a"], to=compute), helper.make_node("Cast", ["INPUT1"], ["b"], to=compute)]
        a, b = "a", "b"
    sums, diffs = ("sum", "diff") if compute is not None else ("OUTPUT0", "OUTPUT1")
    nodes += [helper.make_node("Add", [a, b], [sums]), helper.make_node("Sub", [a, b], [diffs])]
    if compute is not None:
        nodes += [helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=elem), helper.make_node("Cast", ["diff"], ["OUTPUT1"], to=elem)]
    return _model(nodes, [value(n, elem, ["batch", 16]) for n in ("INPUT0", "INPUT1")],
                  [value(n, elem, ["batch", 16]) for n in ("OUTPUT0", "OUTPUT1")])  # fmt: skip


def simple_string() -> onnx.ModelProto:
    """Triton's QA `simple_string`: numbers as BYTES [batch, 16] in and out (sum and difference)."""
    return _pair(TensorProto.STRING, TensorProto.INT32)


def simple_int8() -> onnx.ModelProto:
    """Triton's QA `simple_int8`: INT8 [batch, 16] in and out (sum and difference)."""
    return _pair(TensorProto.INT8)


def simple_identity() -> onnx.ModelProto:
    """Triton's QA `simple_identity`: INPUT0 BYTES [batch, -1] -> OUTPUT0, the same."""
    return _model([helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
                  [value("INPUT0", TensorProto.STRING, ["batch", "n"])], [value("OUTPUT0", TensorProto.STRING, ["batch", "n"])])  # fmt: skip


def brain() -> onnx.ModelProto:
    """BF16 in and out: y = x * x computed in FP32, [batch, 8]."""
    return _model([helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT), helper.make_node("Mul", ["f", "f"], ["g"]),
                   helper.make_node("Cast", ["g"], ["y"], to=TensorProto.BFLOAT16)],
                  [value("x", TensorProto.BFLOAT16, ["batch", 8])], [value("y", TensorProto.BFLOAT16, ["batch", 8])])  # fmt: skip


def bf16_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray], shapes: dict[str, tuple]) -> dict:
    """onnxruntime's outputs of a graph with BF16 inputs and outputs (`shapes`: each output's), its
    bits read from buffers bound as BF16 tensors, since its Python binding takes no bfloat16 arrays."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    binding = session.io_binding()
    for name, array in feeds.items():
        bits = np.ascontiguousarray(array.astype(ml_dtypes.bfloat16)).view(np.uint16)
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16))
    outputs = {name: np.zeros(shape, np.uint16) for name, shape in shapes.items()}
    for name, bits in outputs.items():
        binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16))
    session.run_with_iobinding(binding)
    return {name: bits.view(ml_dtypes.bfloat16) for name, bits in outputs.items()}
