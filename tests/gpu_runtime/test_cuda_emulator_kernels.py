"""Every kernel family's CUDA source, run by the CUDA emulator, against its own NumPy reference on
small odd shapes (partial tiles, bounds checks, grid-stride and row loops), the guard (a set flag
means no writes), and a small conv net through EmulatedExecutor against onnxruntime."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from gpu_runtime.compiler.importer import import_model
from gpu_runtime.compiler.program import KernelDef
from gpu_runtime.kernels import conv, elementwise, gemm, layout, pool, rows
from gpu_runtime.kernels.emulator import EmulatedKernel
from gpu_runtime.kernels.emulator.executor import EmulatedExecutor
from gpu_runtime.kernels.source import contiguous_strides, pad_shape
from scheduler.padded_kernel import dispatcher_source
from tests.gpu_runtime.zoo_cases import zoo_model


@dataclass
class Case:
    kernel: KernelDef
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple  # without the guard flag; arrays are copied per run
    rtol: float = 2e-6


def _rand(rng, *shape, positive=False) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32)
    return np.abs(x) + np.float32(0.1) if positive else x


UNARY_PARAMS = {"hardsigmoid": (0.2, 0.5), "clip": (-0.5, 0.7), "leakyrelu": (0.1, 0.0)}


def unary_case(rng, op):
    n = 1037
    x = _rand(rng, n, positive=op in ("log", "sqrt"))
    alpha, beta = UNARY_PARAMS.get(op, (0.0, 0.0))
    return Case(elementwise.unary(op), (3, 1, 1), (128, 1, 1),
                (x, np.zeros_like(x), n, alpha, beta))


def binary_case(rng, op):
    a_shape, b_shape = (3, 1, 5, 7), (1, 4, 1, 7)
    out = np.broadcast_shapes(a_shape, b_shape)
    dims, _ = pad_shape(out)

    def strides(shape):
        tdims, ts = pad_shape(shape)
        return [0 if td == 1 and od != 1 else s for td, od, s in zip(tdims, dims, ts)]

    a = _rand(rng, *a_shape, positive=op == "pow")
    b = _rand(rng, *b_shape, positive=op == "div")
    n = int(np.prod(out))
    return Case(elementwise.binary(op), (2, 1, 1), (256, 1, 1),
                (a, b, np.zeros(out, np.float32), n, *dims, *strides(a_shape), *strides(b_shape)))


def fill_case(rng):
    return Case(elementwise.fill(), (2, 1, 1), (256, 1, 1), (_rand(rng, 777), 777, 2.5))


def copy_case(rng):
    """A transpose (3, 5, 7) -> (7, 3, 5) between offset windows of larger buffers."""
    x = _rand(rng, 4 + 105)
    xs = [1, 35, 7]  # element strides of x[4:].reshape(3, 5, 7).transpose(2, 0, 1)
    dims, xs6 = pad_shape((7, 3, 5), xs)
    _, ys6 = pad_shape((7, 3, 5), contiguous_strides((7, 3, 5)))
    return Case(layout.copy(), (1, 1, 1), (64, 1, 1),
                (x, _rand(rng, 3 + 105 + 2), 105, 4, 3, *dims, *xs6, *ys6))


def pool_case(rng, mode, include_pad, dil):
    NC, H, W, KH, KW, sh, sw, ph, pw = 6, 11, 9, 3, 2, 2, 1, 1, 1
    OH = (H + 2 * ph - dil * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dil * (KW - 1) - 1) // sw + 1
    x = _rand(rng, NC, H, W)
    return Case(pool.pool(mode), (2, 1, 1), (128, 1, 1),
                (x, np.zeros((NC, OH, OW), np.float32), NC, H, W, OH, OW, KH, KW, sh, sw, ph, pw,
                 dil, dil, include_pad))


def reduce_mean_case(rng):
    outer, L, inner = 3, 37, 5
    return Case(rows.reduce_mean(), (4, 1, 1), (64, 1, 1),
                (_rand(rng, outer, L, inner), np.zeros(outer * inner, np.float32), outer * inner,
                 L, inner), rtol=1e-5)


def softmax_case(rng, log):
    outer, L, inner = 2, 300, 3
    x = _rand(rng, outer, L, inner) * 3
    return Case(rows.softmax(log), (5, 1, 1), (96, 1, 1),
                (x, np.zeros_like(x), outer * inner, L, inner), rtol=1e-5)


def layer_norm_case(rng):
    outer, L = 5, 200
    return Case(rows.layer_norm(), (5, 1, 1), (64, 1, 1),
                (_rand(rng, outer, L) + 2, _rand(rng, L), _rand(rng, L),
                 np.zeros((outer, L), np.float32), outer, L, 1, 1e-5), rtol=1e-5)


def matmul_case(rng, act, has_c):
    """Y[z] = act(1.5 A^T[z] B + 0.5 C): A stored transposed, B shared by both z, C a bias row."""
    Z, M, N, K = 2, 67, 45, 33
    a, b, c = _rand(rng, Z, K, M), _rand(rng, K, N), _rand(rng, N)
    return Case(gemm.matmul(act, has_c), gemm.gemm_grid(M, N, Z), (gemm.THREADS, 1, 1),
                (a, b, c if has_c else a, np.zeros((Z, M, N), np.float32), M, N, K,
                 K * M, 1, M, 0, N, 1, 0, 1, 1.5, 0.5), rtol=1e-5)


def conv_geometry():
    n, H, W, KH, KW, sh, sw, ph, pw, dh, dw = 2, 9, 11, 3, 2, 2, 1, 1, 0, 1, 2
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    return n, H, W, OH, OW, [KH, KW, sh, sw, ph, pw, dh, dw]


def conv_implicit_case(rng, act):
    C, groups, cout = 4, 2, 34  # 17 output channels per group: a partial channel tile
    n, H, W, OH, OW, geo = conv_geometry()
    cg, og = C // groups, cout // groups
    m, k = n * OH * OW, cg * geo[0] * geo[1]
    return Case(gemm.conv_implicit(act), gemm.gemm_grid(m, og, groups), (gemm.THREADS, 1, 1),
                (_rand(rng, n, C, H, W), _rand(rng, cout, cg, geo[0], geo[1]), _rand(rng, cout),
                 np.zeros((n, cout, OH, OW), np.float32), m, og, k, C, cg, H, W, cout, OH, OW,
                 *geo), rtol=1e-5)


def conv_direct_case(rng, act, C, groups, cout):
    n, H, W, OH, OW, geo = conv_geometry()
    return Case(conv.conv_direct(act), (3, 1, 1), (128, 1, 1),
                (_rand(rng, n, C, H, W), _rand(rng, cout, C // groups, geo[0], geo[1]),
                 _rand(rng, cout), np.zeros((n, cout, OH, OW), np.float32), n, C, H, W, cout,
                 OH, OW, *geo, groups), rtol=1e-5)


CASES = {
    **{f"unary_{op}": lambda r, op=op: unary_case(r, op) for op in elementwise.UNARY},
    **{f"binary_{op}": lambda r, op=op: binary_case(r, op) for op in elementwise.BINARY},
    "fill": fill_case,
    "copy": copy_case,
    "pool_max": lambda r: pool_case(r, "max", 0, 1),
    "pool_avg": lambda r: pool_case(r, "avg", 0, 1),
    "pool_avg_pad_dilated": lambda r: pool_case(r, "avg", 1, 2),
    "reduce_mean": reduce_mean_case,
    "softmax": lambda r: softmax_case(r, False),
    "log_softmax": lambda r: softmax_case(r, True),
    "layer_norm": layer_norm_case,
    **{f"matmul_{act}{'_c' * c}": lambda r, a=act, c=c: matmul_case(r, a, c)
       for act in ("none", "relu", "hardswish") for c in (False, True)},
    **{f"conv_implicit_{act}": lambda r, a=act: conv_implicit_case(r, a)
       for act in ("none", "relu", "hardswish")},
    **{f"conv_direct_{act}": lambda r, a=act: conv_direct_case(r, a, 6, 6, 6)
       for act in ("none", "relu", "hardswish")},
    "conv_direct_grouped": lambda r: conv_direct_case(r, "relu", 4, 2, 6),
}


def _emulate(case: Case, flag: int) -> list:
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in case.args]
    EmulatedKernel(case.kernel).launch(case.grid, case.block,
                                       (np.array([flag], np.int32), *args))
    return args


@pytest.mark.parametrize("name", CASES)
def test_cuda_source_matches_numpy_reference(name):
    case = CASES[name](np.random.default_rng(sorted(CASES).index(name)))
    got = _emulate(case, flag=0)
    want = [a.copy() if isinstance(a, np.ndarray) else a for a in case.args]
    case.kernel.numpy_impl(*want)
    for g, w in zip(got, want):
        if isinstance(w, np.ndarray):
            np.testing.assert_allclose(g, w, rtol=case.rtol, atol=case.rtol * np.abs(w).max())


@pytest.mark.parametrize("name", CASES)
def test_set_guard_flag_means_no_writes(name):
    case = CASES[name](np.random.default_rng(0))
    got = _emulate(case, flag=1)
    for g, a in zip(got, case.args):
        if isinstance(a, np.ndarray):
            assert g.tobytes() == a.tobytes()


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


def _emulated_and_onnxruntime(model: onnx.ModelProto, batch: int, x: np.ndarray):
    program = import_model(model, batch)
    name = model.graph.input[0].name
    ex = EmulatedExecutor()
    got = ex.run(ex.load(program), {name: x})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outputs = [o.name for o in sess.get_outputs()]
    return program, got, dict(zip(outputs, sess.run(outputs, {name: x})))


def test_tiny_convnet_through_the_cuda_sources_matches_onnxruntime():
    x = np.random.default_rng(5).standard_normal((2, 3, 13, 11)).astype(np.float32)
    program, got, want = _emulated_and_onnxruntime(_tiny_convnet(), 2, x)
    kernels = {launch.kernel.name for launch in program.launches}
    assert {"atoll_conv_igemm_relu", "atoll_conv_direct_hardswish", "atoll_pool_max",
            "atoll_pool_avg", "atoll_unary_swish", "atoll_binary_add", "atoll_reduce_mean",
            "atoll_gemm_none_c", "atoll_softmax", "atoll_strided_copy",
            "atoll_layer_norm"} <= kernels, kernels
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


def test_mobilenet_v3_small_at_32x32_matches_onnxruntime():
    """The zoo model with its input resized (global pooling makes it size-agnostic): 88 launches
    of conv, SE, hardswish and classifier kernels through the CUDA sources."""
    model = onnx.ModelProto()
    model.CopyFrom(zoo_model("mobilenet_v3_small"))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_value = dims[3].dim_value = 32
    x = np.random.default_rng(6).standard_normal((1, 3, 32, 32)).astype(np.float32)
    _, got, want = _emulated_and_onnxruntime(model, 1, x)
    err = np.abs(got["logits"] - want["logits"]).max() / np.abs(want["logits"]).max()
    assert err < 1e-4


def test_padded_dispatcher_runs_rt_and_be_bodies_in_one_launch():
    """scheduler/padded_kernel.py's DKP source transformation, checked without a GPU: the first
    blocks run the RT softmax, the rest a BE relu, each against its own NumPy reference."""
    rng = np.random.default_rng(8)
    x, u = rng.standard_normal((6, 70)).astype(np.float32), _rand(rng, 3000)
    y, v, zero = np.zeros_like(x), np.zeros_like(u), np.zeros(1, np.int32)
    kernel = EmulatedKernel(KernelDef(
        "atoll_padded", dispatcher_source([rows.softmax(), elementwise.unary("relu")], 256, 2),
        numpy_impl=None))
    kernel.launch(3 + 4, 256, (3, 3, 1, zero, x, y, 6, 70, 1,
                               4, 4, 1, zero, u, v, u.size, 0.0, 0.0))
    want = np.zeros_like(x)
    rows.softmax().numpy_impl(x, want, 6, 70, 1)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(v, np.maximum(u, 0))
