"""Importer + NumPy executor on small ONNX graphs of standard ops, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpu_runtime.compiler.importer import UnsupportedModelError, import_model
from gpu_runtime.executors.numpy_executor import NumpyExecutor

RNG = np.random.default_rng(7)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def make(nodes, inputs, inits=None, outputs=("y",), opset=17):
    inits = inits or {}
    graph = helper.make_graph(
        nodes, "t",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(nodes, inputs, inits=None, outputs=("y",), opset=17, tol=1e-5):
    model = make(nodes, inputs, inits, outputs, opset)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        list(outputs), inputs)
    batch = next(iter(inputs.values())).shape[0]
    program = import_model(model, batch)
    ex = NumpyExecutor()
    got = ex.run(ex.load(program), inputs)
    for name, w in zip(outputs, want):
        assert got[name].shape == w.shape, name
        np.testing.assert_allclose(got[name], w, rtol=tol, atol=tol * max(1.0, np.abs(w).max()))
    return program


def node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), **attrs)


CONV_CASES = [  # (x shape, w shape, attrs)
    ((2, 8, 9, 9), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 8, 9, 9), (32, 4, 3, 3), dict(group=2, strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 16, 10, 10), (16, 1, 5, 5), dict(group=16, pads=[2, 2, 2, 2], strides=[2, 2])),
    ((1, 6, 11, 11), (8, 3, 3, 3), dict(group=2, dilations=[2, 2], pads=[0, 1, 2, 1])),
    ((2, 4, 7, 8), (20, 4, 2, 3), dict(strides=[2, 1], auto_pad="SAME_UPPER")),
    ((2, 5, 30), (24, 5, 5), dict(strides=[2], dilations=[2], pads=[4, 3])),
    ((2, 12, 31), (12, 1, 7), dict(group=12, pads=[3, 3])),
    ((1, 3, 12, 12), (4, 3, 1, 1), dict()),
]


@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
def test_conv_variants_match_onnxruntime(xs, ws, attrs):
    check([node("Conv", ["x", "w", "b"], **attrs)], {"x": rand(*xs)},
          {"w": rand(*ws, scale=0.3), "b": rand(ws[0])})


def test_conv_batchnorm_relu_are_fused_into_one_launch():
    c = 24
    inits = {"w": rand(c, 8, 3, 3, scale=0.3), "g": rand(c) + 1, "be": rand(c),
             "m": rand(c), "v": np.abs(rand(c)) + 0.5}
    program = check([node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                     node("BatchNormalization", ["c", "g", "be", "m", "v"], ["n"]),
                     node("Relu", ["n"])], {"x": rand(2, 8, 6, 6)}, inits)
    assert len(program.launches) == 1


def test_standalone_batchnorm():
    c = 5
    inits = {"g": rand(c), "be": rand(c), "m": rand(c), "v": np.abs(rand(c)) + 0.5}
    check([node("BatchNormalization", ["x", "g", "be", "m", "v"], epsilon=1e-3)],
          {"x": rand(2, c, 4, 3)}, inits)


@pytest.mark.parametrize("op,attrs", [
    ("Relu", {}), ("Sigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("HardSwish", {}), ("Erf", {}), ("Tanh", {}), ("Exp", {}), ("Neg", {}), ("Abs", {}),
    ("LeakyRelu", {"alpha": 0.2}),
])
def test_unary(op, attrs):
    check([node(op, ["x"], **attrs)], {"x": rand(3, 4, 5, scale=3)})


def test_gelu_opset20():
    check([node("Gelu", ["x"])], {"x": rand(3, 7, scale=3)}, opset=20)


def test_clip_with_constant_bounds():
    check([node("Clip", ["x", "lo", "hi"])], {"x": rand(4, 6, scale=3)},
          {"lo": np.float32(-0.5), "hi": np.float32(1.0)})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("a,b,b_const", [
    ((2, 3, 4, 5), (5,), True), ((2, 1, 4, 1), (1, 3, 1, 5), False), ((3, 1), (1, 4), False),
    ((2, 3, 4), (2, 3, 4), False), ((4, 3), (), True),
])
def test_binary_broadcasting(op, a, b, b_const):
    y = rand(*b) + (3.0 if op == "Div" else 0.0)
    inputs = {"a": rand(*a)}
    inits = {}
    (inits if b_const else inputs)["b"] = y
    check([node(op, ["a", "b"])], inputs, inits)


@pytest.mark.parametrize("attrs,cshape", [
    ({}, (7,)), ({"transA": 1}, (5, 7)), ({"transB": 1, "alpha": 0.5, "beta": 2.0}, (1, 7)),
    ({"transA": 1, "transB": 1}, None),
])
def test_gemm(attrs, cshape):
    m, k, n = 5, 6, 7
    a = rand(k, m) if attrs.get("transA") else rand(m, k)
    inits = {"b": rand(n, k) if attrs.get("transB") else rand(k, n)}
    ins = ["a", "b"]
    if cshape:
        inits["c"] = rand(*cshape)
        ins.append("c")
    check([node("Gemm", ins, **attrs)], {"a": a}, inits)


def test_gemm_relu_fused():
    program = check([node("Gemm", ["a", "b", "c"], ["g"], transB=1), node("Relu", ["g"])],
                    {"a": rand(3, 70)}, {"b": rand(65, 70), "c": rand(65)})
    assert len(program.launches) == 1


@pytest.mark.parametrize("a,b,b_const", [
    ((4, 70), (70, 66), True), ((2, 9, 8), (8, 5), True), ((2, 3, 9, 8), (2, 3, 8, 10), False),
])
def test_matmul(a, b, b_const):
    inputs, inits = {"a": rand(*a)}, {}
    (inits if b_const else inputs)["b"] = rand(*b)
    check([node("MatMul", ["a", "b"])], inputs, inits, tol=1e-4)


def test_matmul_with_bias_is_one_launch():
    program = check([node("MatMul", ["a", "w"], ["m"]), node("Add", ["m", "bias"])],
                    {"a": rand(2, 5, 8)}, {"w": rand(8, 3), "bias": rand(3)})
    assert len(program.launches) == 1


@pytest.mark.parametrize("op,attrs,shape", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), (2, 3, 9, 9)),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), (1, 4, 10, 10)),
    ("MaxPool", dict(kernel_shape=[2, 2], dilations=[2, 2]), (1, 2, 8, 8)),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), (2, 3, 7, 6)),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), (1, 3, 7, 6)),
    ("AveragePool", dict(kernel_shape=[4], strides=[2]), (2, 3, 20)),
    ("MaxPool", dict(kernel_shape=[3], strides=[1], pads=[1, 1]), (2, 3, 11)),
    ("GlobalAveragePool", {}, (2, 5, 6, 7)),
])
def test_pooling(op, attrs, shape):
    check([node(op, ["x"], **attrs)], {"x": rand(*shape)})


@pytest.mark.parametrize("op,axis", [("Softmax", -1), ("Softmax", 1), ("LogSoftmax", -1),
                                     ("LogSoftmax", 0)])
def test_softmax(op, axis):
    check([node(op, ["x"], axis=axis)], {"x": rand(3, 5, 4, scale=3)})


@pytest.mark.parametrize("axis", [-1, -2])
def test_layer_norm(axis):
    shape = (3, 5, 6)
    norm = shape[axis:]
    check([node("LayerNormalization", ["x", "g", "b"], axis=axis, epsilon=1e-3)],
          {"x": rand(*shape)}, {"g": rand(*norm), "b": rand(*norm)})


@pytest.mark.parametrize("axes,keepdims", [([1], 0), ([2, 3], 1), ([-1], 1)])
def test_reduce_mean(axes, keepdims):
    check([node("ReduceMean", ["x"], axes=axes, keepdims=keepdims)], {"x": rand(2, 3, 4, 5)})


def test_layout_ops():
    x = rand(2, 3, 4, 5)
    check([node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
           node("Reshape", ["t", "shape"], ["r"]),
           node("Concat", ["r", "r2"], ["c"], axis=1),
           node("Flatten", ["c"], ["y"], axis=1)],
          {"x": x}, {"shape": np.array([0, -1, 3], np.int64), "r2": rand(2, 2, 3)})


def test_slice_with_negative_steps_and_axes():
    check([node("Slice", ["x", "s", "e", "a", "st"])], {"x": rand(2, 6, 7)},
          {"s": np.array([-1, 1], np.int64), "e": np.array([-100, 100], np.int64),
           "a": np.array([2, 1], np.int64), "st": np.array([-2, 2], np.int64)})


def test_pad_split_gather_expand_squeeze():
    check([node("Pad", ["x", "pads", "val"], ["p"]),
           node("Split", ["p", "sizes"], ["s1", "s2"], axis=2),
           node("Gather", ["s2", "idx"], ["g"], axis=1),
           node("Unsqueeze", ["g", "ax"], ["u"]),
           node("Squeeze", ["u", "ax"], ["q"]),
           node("Expand", ["q", "eshape"], ["y"])],
          {"x": rand(2, 3, 4)},
          {"pads": np.array([0, 1, 2, 0, 0, 1], np.int64), "val": np.float32(0.5),
           "sizes": np.array([2, 5], np.int64), "idx": np.array([3, 0, 3], np.int64),
           "ax": np.array([1], np.int64), "eshape": np.array([2, 1, 1], np.int64)})


def test_split_equal_parts_and_scalar_gather():
    check([node("Split", ["x"], ["a", "b"], axis=1), node("Gather", ["b", "i"], ["y"], axis=1)],
          {"x": rand(2, 6, 3)}, {"i": np.array(1, np.int64)})


def test_shape_arithmetic_is_folded_at_import():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters write flatten: no launch."""
    program = check(
        [node("Shape", ["x"], ["s"]), node("Gather", ["s", "zero"], ["n"], axis=0),
         node("Unsqueeze", ["n", "ax"], ["nu"]), node("Concat", ["nu", "minus1"], ["shape"], axis=0),
         node("Reshape", ["x", "shape"], ["y"])],
        {"x": rand(3, 4, 5)},
        {"zero": np.array(0, np.int64), "ax": np.array([0], np.int64),
         "minus1": np.array([-1], np.int64)})
    assert program.launches == []


def test_unsupported_op_is_named():
    model = make([node("Hardmax", ["x"], name="my_hardmax")], {"x": rand(2, 3)})
    with pytest.raises(UnsupportedModelError, match="node 'my_hardmax': op Hardmax is not supported"):
        import_model(model, 2)


def test_unsupported_attribute_is_named():
    model = make([node("Pad", ["x", "pads"], mode="reflect", name="pad0")], {"x": rand(2, 3)},
                 {"pads": np.array([0, 1, 0, 1], np.int64)})
    with pytest.raises(UnsupportedModelError, match=r"node 'pad0' \(Pad\): attribute 'mode'"):
        import_model(model, 2)


def test_dynamic_length_needs_a_value():
    graph = helper.make_graph([node("Relu", ["x"])], "t",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 80, "T"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedModelError, match="dynamic dimension 2"):
        import_model(model, 1)
    assert import_model(model, 3, 50).buffers[0].shape == (3, 80, 50)


def test_erf_gelu_chain_is_one_launch():
    """torch.onnx's exact GELU (Div, Erf, Add, Mul, Mul) lowers to a single kernel."""
    program = check([node("Div", ["x", "sqrt2"], ["d"]), node("Erf", ["d"], ["e"]),
                     node("Add", ["e", "one"], ["a"]), node("Mul", ["x", "a"], ["m"]),
                     node("Mul", ["m", "half"])],
                    {"x": rand(3, 50, scale=3)},
                    {"sqrt2": np.float32(np.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)})
    assert [launch.kernel.name for launch in program.launches] == ["atoll_ew_gelu_1"]


def test_gelu_like_chain_with_other_constants_is_not_fused():
    program = check([node("Div", ["x", "c"], ["d"]), node("Erf", ["d"], ["e"]),
                     node("Add", ["e", "one"], ["a"]), node("Mul", ["x", "a"], ["m"]),
                     node("Mul", ["m", "half"])],
                    {"x": rand(3, 50)},
                    {"c": np.float32(2.0), "one": np.float32(1), "half": np.float32(0.5)})
    assert len(program.launches) == 5


def test_swish_is_one_launch_and_shared_sigmoid_is_not_fused():
    program = check([node("Sigmoid", ["x"], ["s"]), node("Mul", ["s", "x"])], {"x": rand(4, 9, scale=3)})
    assert [launch.kernel.name for launch in program.launches] == ["atoll_ew_swish_1vcc"]
    program = check([node("Sigmoid", ["x"], ["s"]), node("Mul", ["s", "x"], ["m"]),
                     node("Add", ["m", "s"])], {"x": rand(4, 9)})
    assert len(program.launches) == 3


def test_unknown_attribute_on_a_layout_op_is_named():
    model = make([node("Transpose", ["x"], perm=[1, 0], frobnicate=1, name="t0")], {"x": rand(2, 3)})
    with pytest.raises(UnsupportedModelError, match=r"node 't0' \(Transpose\): attribute 'frobnicate'"):
        import_model(model, 2)
