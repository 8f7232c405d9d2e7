"""Every kernel family's CUDA source, run by the CUDA emulator, against its own NumPy reference.

Small ONNX graphs chosen to reach each variant (GEMM operand modes, row tables, split-K, fused
epilogues, convolutions as implicit GEMM, depthwise and pooling windows, squeeze-excitation,
strided and gathered elementwise, row reductions) are lowered at fp32 and fp16 and run launch
by launch on both: every launch's outputs must agree (the NumPy state is then copied over, so a
wrong kernel is named, not its consequences), and a launch made with the guard flag set must
write nothing. A small conv net and MobileNetV3 at 32x32 go through end to end against
onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from gpu_runtime.compiler.importer import import_model
from gpu_runtime.executors.emulated_executor import EmulatedExecutor
from gpu_runtime.executors.numpy_executor import NumpyExecutor
from onnx import TensorProto, helper, numpy_helper
from tests.gpu_runtime.zoo_cases import zoo_model

RNG = np.random.default_rng(11)


def _w(*shape, scale=0.3):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _graph(nodes, inputs: dict, inits: dict, outputs=("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, shape) for k, shape in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), **attrs)


def _ints(*v):
    return np.array(v, np.int64)


def gemm_modes():
    """MatMul with A transposed (m-contiguous), B broadcast over a batch, a bias, a residual Add
    and a GELU; then a long-K product with few outputs (split over K)."""
    return _graph(
        [node("Transpose", ["a"], ["at"], perm=[0, 2, 1]),
         node("MatMul", ["at", "w"], ["m"]), node("Add", ["m", "b"], ["mb"]),
         node("Add", ["mb", "r"], ["s"]), node("Gelu", ["s"], ["y"]),
         node("MatMul", ["y", "w2"], ["z"])],
        {"a": [2, 24, 36], "r": [2, 36, 20]}, {"w": _w(24, 20), "b": _w(20), "w2": _w(20, 3)},
        ("y", "z"))


def gemm_views():
    """Attention-like products: head split and transposes as strides, a scalar folded into
    alpha, a constant addend, softmax rows, and a transposed result written in place."""
    return _graph(
        [node("Reshape", ["x", "s4"], ["h"]), node("Transpose", ["h"], ["q"], perm=[0, 2, 1, 3]),
         node("Transpose", ["q"], ["kt"], perm=[0, 1, 3, 2]), node("Mul", ["q", "c"], ["qs"]),
         node("MatMul", ["qs", "kt"], ["sc"]), node("Add", ["sc", "bias"], ["sb"]),
         node("Softmax", ["sb"], ["p"], axis=-1), node("MatMul", ["p", "q"], ["o"]),
         node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), node("Reshape", ["ot", "s3"], ["r"]),
         node("Reshape", ["r", "s2"], ["r2"]), node("Gemm", ["r2", "wt"], ["y"], transB=1)],
        {"x": [2, 9, 16]},
        {"s4": _ints(2, 9, 4, 4), "s3": _ints(2, 9, 16), "s2": _ints(18, 16), "c": np.float32(0.5),
         "bias": _w(4, 9, 9), "wt": _w(12, 16)})


def gathered_rows():
    """Swin's cyclic shift (Slice + Concat) and window partition as a row table feeding a
    MatMul, and the reverse shift added back through a gathered operand."""
    shift = [node("Slice", ["x", "b1", "e1", "ax1"], ["h1"]), node("Slice", ["x", "z", "b1", "ax1"], ["t1"]),
             node("Concat", ["h1", "t1"], ["c1"], axis=1),
             node("Reshape", ["c1", "sp"], ["p1"]), node("Transpose", ["p1"], ["p2"], perm=[0, 1, 3, 2, 4]),
             node("Reshape", ["p2", "sw"], ["win"]), node("MatMul", ["win", "w"], ["o"]),
             node("Reshape", ["o", "sx"], ["ob"]),
             node("Slice", ["ob", "z", "b1", "ax1"], ["h2"]), node("Slice", ["ob", "b1", "e1", "ax1"], ["t2"]),
             node("Concat", ["h2", "t2"], ["back"], axis=1), node("Add", ["x", "back"], ["y"])]
    return _graph(shift, {"x": [2, 8, 4, 8]},
                  {"b1": _ints(6), "e1": _ints(8), "z": _ints(0), "ax1": _ints(1),
                   "sp": _ints(2, 2, 4, 4, 8), "sw": _ints(8, 8, 8), "sx": _ints(2, 8, 4, 8),
                   "w": _w(8, 8)})


def convs():
    """k x k conv with BN and ReLU, strided dilated grouped conv, depthwise with HardSwish,
    squeeze-excitation scaling the next 1x1 conv, residual add, pools, a 1-D conv."""
    c = 16
    return _graph(
        [node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
         node("BatchNormalization", ["c1", "g", "bt", "m", "v"], ["n1"]), node("Relu", ["n1"], ["r1"]),
         node("Conv", ["r1", "wd"], ["d1"], group=c, pads=[2, 2, 2, 2], kernel_shape=[5, 5]),
         node("HardSwish", ["d1"], ["h1"]), node("GlobalAveragePool", ["h1"], ["gp"]),
         node("Conv", ["gp", "s1", "sb1"], ["q1"]), node("Relu", ["q1"], ["q2"]),
         node("Conv", ["q2", "s2", "sb2"], ["q3"]), node("HardSigmoid", ["q3"], ["q4"], alpha=1 / 6),
         node("Mul", ["h1", "q4"], ["se"]), node("Conv", ["se", "wp"], ["pr"]),
         node("Add", ["pr", "r1"], ["res"]),
         node("Conv", ["res", "wg"], ["gc"], group=2, strides=[2, 2], dilations=[2, 2], pads=[2, 1, 2, 1]),
         node("MaxPool", ["gc"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
         node("AveragePool", ["res"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         node("Reshape", ["ap", "flat"], ["ap1"]), node("Conv", ["ap1", "w1d"], ["y"], pads=[3, 3])],
        {"x": [2, 3, 11, 13]},
        {"w1": _w(c, 3, 3, 3), "g": _w(c) + 1, "bt": _w(c), "m": _w(c),
         "v": np.abs(_w(c)) + 0.5, "wd": _w(c, 1, 5, 5), "s1": _w(8, c, 1, 1), "sb1": _w(8),
         "s2": _w(c, 8, 1, 1), "sb2": _w(c), "wp": _w(c, c, 1, 1), "wg": _w(6, 8, 3, 3),
         "flat": _ints(2, c, 11 * 13), "w1d": _w(5, c, 7)})


def audio_blocks():
    """CitriNet's separable block tail (SE scale times the block, plus a residual conv, ReLU),
    Conformer's GLU and transposed pointwise conv, layer norm, log-softmax."""
    c, t = 8, 23
    return _graph(
        [node("Conv", ["x", "wd"], ["d"], group=c, pads=[5, 5]),
         node("Conv", ["d", "wp"], ["h"]), node("ReduceMean", ["h"], ["mu"], axes=[2]),
         node("Conv", ["mu", "s1", "b1"], ["q1"]), node("Relu", ["q1"], ["q2"]),
         node("Conv", ["q2", "s2", "b2"], ["q3"]), node("Sigmoid", ["q3"], ["q4"]),
         node("Mul", ["h", "q4"], ["hs"]), node("Conv", ["x", "wr"], ["res"]),
         node("Add", ["hs", "res"], ["sum"]), node("Relu", ["sum"], ["r"]),
         node("Conv", ["r", "wg", "bg"], ["g2"]), node("Split", ["g2"], ["ga", "gb"], axis=1),
         node("Sigmoid", ["gb"], ["gs"]), node("Mul", ["ga", "gs"], ["glu"]),
         node("Transpose", ["glu"], ["tt"], perm=[0, 2, 1]),
         node("LayerNormalization", ["tt", "lg", "lb"], ["ln"], axis=-1),
         node("Transpose", ["ln"], ["lt"], perm=[0, 2, 1]), node("Conv", ["lt", "wq"], ["pq"]),
         node("Transpose", ["pq"], ["pt"], perm=[0, 2, 1]), node("Add", ["pt", "tt"], ["out"]),
         node("LogSoftmax", ["out"], ["y"], axis=-1)],
        {"x": [2, c, t]},
        {"wd": _w(c, 1, 11), "wp": _w(c, c, 1), "s1": _w(4, c, 1), "b1": _w(4), "s2": _w(c, 4, 1),
         "b2": _w(c), "wr": _w(c, c, 1), "wg": _w(2 * c, c, 1), "bg": _w(2 * c),
         "lg": _w(c) + 1, "lb": _w(c), "wq": _w(c, c, 1)})


def rows_and_elementwise():
    """Softmax over a strided axis, long rows (a block per row), broadcasting arithmetic on odd
    shapes, a scalar multiply, unary maps, a reduce over a middle axis."""
    return _graph(
        [node("Softmax", ["x"], ["s1"], axis=1), node("Add", ["s1", "b"], ["a1"]),
         node("Mul", ["a1", "x"], ["m1"]), node("Tanh", ["m1"], ["t1"]),
         node("LayerNormalization", ["long", "g", "bb"], ["ln"], axis=-1),
         node("LogSoftmax", ["ln"], ["ls"], axis=-1), node("ReduceMean", ["t1"], ["y"], axes=[1]),
         node("Div", ["x", "c"], ["dv"]), node("Sub", ["dv", "b"], ["z"])],
        {"x": [3, 5, 7], "long": [2, 1100]},
        {"b": _w(7), "g": _w(1100) + 1, "bb": _w(1100), "c": np.float32(3.0)}, ("y", "ls", "z"))


GRAPHS = {"gemm_modes": gemm_modes, "gemm_views": gemm_views, "gathered_rows": gathered_rows,
          "convs": convs, "audio_blocks": audio_blocks, "rows_and_elementwise": rows_and_elementwise}
TOLERANCE = {"fp32": 2e-5, "fp16": 2e-3}  # fp16: the emulator's fp32 sums in another order


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(4)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in model.graph.input}


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("graph", GRAPHS)
def test_every_launch_matches_its_numpy_reference(graph, precision):
    model = GRAPHS[graph]()
    feeds = _feeds(model)
    program = import_model(model, next(iter(feeds.values())).shape[0], precision=precision)
    ref, emu = NumpyExecutor(), EmulatedExecutor()
    rs, es = ref.load(program), emu.load(program)
    ref.set_inputs(rs, feeds)
    emu.set_inputs(es, feeds)
    for i, launch in enumerate(program.launches):
        before = [es.views[w].copy() for w in launch.writes]
        es.flag.set()
        emu.launch(es, i)
        es.flag.clear()
        for w, b in zip(launch.writes, before):
            assert es.views[w].tobytes() == b.tobytes(), f"{launch.kernel.name} wrote while preempted"
        ref.launch(rs, i)
        emu.launch(es, i)
        for w in launch.writes:
            want, got = rs.views[w].astype(np.float32), es.views[w].astype(np.float32)
            scale = max(float(np.abs(want).max()), 1e-6)
            assert np.abs(got - want).max() <= TOLERANCE[precision] * scale, (i, launch.kernel.name)
            es.views[w][...] = rs.views[w]


def _tiny_convnet() -> onnx.ModelProto:
    """Conv+BN+ReLU, AveragePool, MaxPool, depthwise Conv+HardSwish, swish, residual Add,
    GlobalAveragePool, Gemm, Softmax; and Transpose, LayerNormalization, ReduceMean."""
    rng = np.random.default_rng(3)

    def const(name, *shape, scale=0.3):
        return helper.make_tensor(name, TensorProto.FLOAT, shape,
                                  (rng.standard_normal(shape) * scale).astype(np.float32).ravel())

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g1", "s1", "m1", "v1"], ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("AveragePool", ["r1"], ["a1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["a1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "wd", "bd"], ["d1"], group=16, pads=[1, 1, 1, 1]),
        helper.make_node("HardSwish", ["d1"], ["h1"]),
        helper.make_node("Sigmoid", ["h1"], ["sg"]),
        helper.make_node("Mul", ["h1", "sg"], ["sw"]),
        helper.make_node("Add", ["sw", "p1"], ["e1"]),
        helper.make_node("GlobalAveragePool", ["e1"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["fl"]),
        helper.make_node("Gemm", ["fl", "w2", "b2"], ["lg"], transB=1),
        helper.make_node("Softmax", ["lg"], ["probs"]),
        helper.make_node("Transpose", ["e1"], ["t1"], perm=[0, 2, 3, 1]),
        helper.make_node("LayerNormalization", ["t1", "lns", "lnb"], ["ln"], axis=-1),
        helper.make_node("ReduceMean", ["ln"], ["feat"], axes=[1, 2], keepdims=0),
    ]
    inits = [const("w1", 16, 3, 3, 3), const("b1", 16), const("g1", 16), const("s1", 16),
             const("m1", 16), helper.make_tensor("v1", TensorProto.FLOAT, [16],
                                                 np.linspace(0.5, 1.5, 16, dtype=np.float32)),
             const("wd", 16, 1, 3, 3), const("bd", 16), const("w2", 10, 16), const("b2", 10),
             const("lns", 16), const("lnb", 16)]
    graph = helper.make_graph(
        nodes, "tiny_convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                              ["N", 3, 13, 11])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 10]),
         helper.make_tensor_value_info("feat", TensorProto.FLOAT, ["N", 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _emulated_and_onnxruntime(model: onnx.ModelProto, batch: int, x: np.ndarray,
                              precision: str = "fp32"):
    program = import_model(model, batch, precision=precision)
    name = model.graph.input[0].name
    ex = EmulatedExecutor()
    got = ex.run(ex.load(program), {name: x})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outputs = [o.name for o in sess.get_outputs()]
    return program, got, dict(zip(outputs, sess.run(outputs, {name: x})))


def test_tiny_convnet_through_the_cuda_sources_matches_onnxruntime():
    x = np.random.default_rng(5).standard_normal((2, 3, 13, 11)).astype(np.float32)
    program, got, want = _emulated_and_onnxruntime(_tiny_convnet(), 2, x)
    families = {launch.kernel.name.split("_")[1] for launch in program.launches}
    assert families == {"gemm", "window", "ew", "mean", "softmax", "layernorm"}, families
    for key in want:
        assert got[key].shape == want[key].shape
        np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=1e-5)


def test_set_flag_makes_every_launch_of_a_program_write_nothing():
    program = import_model(_tiny_convnet(), batch=1)
    ex = EmulatedExecutor()
    state = ex.load(program)
    ex.set_inputs(state, {"x": np.ones((1, 3, 13, 11), np.float32)})
    state.flag.set()
    before = [v.copy() for v in state.views]
    for i in range(len(program.launches)):
        ex.launch(state, i)
    assert all(np.array_equal(a, b) for a, b in zip(before, state.views))


@pytest.mark.parametrize("precision,tol", [("fp32", 1e-4), ("fp16", 1e-2)])
def test_mobilenet_v3_small_at_32x32_matches_onnxruntime(precision, tol):
    """The zoo model with its input resized (global pooling makes it size-agnostic): convs as
    GEMMs (tensor cores in fp16), squeeze-excitation and the classifier through the sources."""
    model = onnx.ModelProto()
    model.CopyFrom(zoo_model("mobilenet_v3_small"))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_value = dims[3].dim_value = 32
    x = np.random.default_rng(6).standard_normal((1, 3, 32, 32)).astype(np.float32)
    _, got, want = _emulated_and_onnxruntime(model, 1, x, precision)
    err = np.abs(got["logits"] - want["logits"]).max() / np.abs(want["logits"]).max()
    assert err < tol
