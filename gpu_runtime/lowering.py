"""Per-op lowering: ONNX node (with at least one runtime input) -> launches over buffers.

Each function takes (ctx, node, inputs, attrs) and returns the node's output values. Inputs are
Tensors (runtime) or np.ndarrays (known at import time). Anything not handled raises
UnsupportedModelError naming the attribute; the importer adds the node's name and op.
"""

from __future__ import annotations

import numpy as np

from gpu_runtime.importer import GraphContext, Tensor, UnsupportedModelError, attrs_of
from gpu_runtime.kernels import conv as conv_k
from gpu_runtime.kernels import elementwise, gemm, layout, pool, rows
from gpu_runtime.kernels.source import MAXD, THREADS, contiguous_strides, grid_1d, pad_shape

BLOCK = (THREADS, 1, 1)
FUSIBLE_ACTS = {"Relu": "relu", "HardSwish": "hardswish"}


def _prod(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise UnsupportedModelError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def _only(attrs: dict, allowed: set[str]) -> None:
    extra = sorted(set(attrs) - allowed)
    if extra:
        raise UnsupportedModelError(f"attribute {extra[0]!r} is not supported")


# --- launch helpers -----------------------------------------------------------------------------
def copy(ctx: GraphContext, x: Tensor, y: Tensor, dims, xo, xs, yo, ys) -> None:
    n = _prod(dims)
    if n == 0:
        return
    d, xs6 = pad_shape(dims, xs)
    _, ys6 = pad_shape(dims, ys)
    ctx.b.launch(layout.copy(), grid_1d(n), BLOCK, [x, y, n, int(xo), int(yo), *d, *xs6, *ys6], [y])


def unary(ctx: GraphContext, op: str, x: Tensor, alpha: float = 0.0, beta: float = 0.0) -> Tensor:
    y = ctx.b.tensor(x.shape)
    n = _prod(x.shape)
    ctx.b.launch(elementwise.unary(op), grid_1d(n), BLOCK, [x, y, n, float(alpha), float(beta)], [y])
    return y


def binary(ctx: GraphContext, op: str, a, c) -> Tensor:
    a, c = ctx.b.as_tensor(a), ctx.b.as_tensor(c)
    try:
        shape = np.broadcast_shapes(a.shape, c.shape)
    except ValueError:
        raise UnsupportedModelError(f"shapes {a.shape} and {c.shape} do not broadcast") from None
    if len(shape) > MAXD:
        raise UnsupportedModelError(f"rank {len(shape)} exceeds {MAXD}")
    dims, _ = pad_shape(shape)

    def strides(t: Tensor) -> list[int]:
        tdims, ts = pad_shape(t.shape)
        return [0 if td == 1 and od != 1 else s for td, od, s in zip(tdims, dims, ts)]

    y = ctx.b.tensor(shape)
    n = _prod(shape)
    ctx.b.launch(elementwise.binary(op), grid_1d(n), BLOCK,
                 [a, c, y, n, *dims, *strides(a), *strides(c)], [y])
    return y


def fuse_activation(ctx: GraphContext, out: str) -> tuple[str, str]:
    """If tensor `out`'s sole consumer is a fusible activation, absorb it: (output name, act)."""
    user = ctx.sole_consumer(out, tuple(FUSIBLE_ACTS))
    if user is None:
        return out, "none"
    ctx.absorb(user)
    return user.output[0], FUSIBLE_ACTS[user.op_type]


def _bind(ctx: GraphContext, node, final_name: str, value) -> list:
    """Outputs of a node whose result was moved to a later (absorbed) node's output name."""
    if final_name != node.output[0]:
        ctx.values[final_name] = value
    return [value]


# --- elementwise --------------------------------------------------------------------------------
def _unary_op(op: str, defaults: tuple[float, float] = (0.0, 0.0), names=("alpha", "beta")):
    def lower(ctx, node, ins, attrs):
        _only(attrs, set(names))
        alpha = attrs.get(names[0], defaults[0])
        beta = attrs.get(names[1], defaults[1])
        return [unary(ctx, op, ctx.b.as_tensor(ins[0]), alpha, beta)]
    return lower


def _binary_op(op: str):
    def lower(ctx, node, ins, attrs):
        _only(attrs, set())
        return [binary(ctx, op, ins[0], ins[1])]
    return lower


def _other_input(node, name: str) -> str | None:
    """The input of a two-input node that is not `name` (None if `name` is not an input)."""
    ins = list(node.input)
    if name not in ins:
        return None
    ins.remove(name)
    return ins[0] if len(ins) == 1 else None


def _is_scalar(ctx, name: str | None, value: float) -> bool:
    c = ctx.const(name) if name else None
    return c is not None and c.size == 1 and abs(float(c.reshape(-1)[0]) - value) < 1e-4 * abs(value)


def lower_sigmoid(ctx, node, ins, attrs):
    """Sigmoid(x) feeding only Mul(x, .) is Swish/SiLU: one launch instead of two."""
    _only(attrs, set())
    x = ctx.b.as_tensor(ins[0])
    mul = ctx.sole_consumer(node.output[0], ("Mul",))
    if mul is not None and _other_input(mul, node.output[0]) == node.input[0]:
        ctx.absorb(mul)
        return _bind(ctx, node, mul.output[0], unary(ctx, "swish", x))
    return [unary(ctx, "sigmoid", x)]


def match_erf_gelu(ctx, node) -> str | None:
    """x / sqrt(2) (or x * 1/sqrt(2)) -> Erf -> + 1 -> * x -> * 0.5, torch.onnx's exact GELU:
    absorbs the chain and returns its output name, or None if `node` does not start one."""
    x = node.input[0]
    scale = 1.0 / np.sqrt(2.0) if node.op_type == "Mul" else np.sqrt(2.0)
    if not _is_scalar(ctx, node.input[1], scale):
        return None
    chain = [node]
    for op, check in (("Erf", None), ("Add", 1.0), ("Mul", x), ("Mul", 0.5)):
        nxt = ctx.sole_consumer(chain[-1].output[0], (op,))
        if nxt is None:
            return None
        other = _other_input(nxt, chain[-1].output[0]) if op != "Erf" else None
        if isinstance(check, float) and not _is_scalar(ctx, other, check):
            return None
        if isinstance(check, str) and other != check:
            return None
        chain.append(nxt)
    for n in chain[1:]:
        ctx.absorb(n)
    return chain[-1].output[0]


def _scaling_op(op: str):
    """Div and Mul also open torch's erf-form GELU."""
    plain = _binary_op(op)

    def lower(ctx, node, ins, attrs):
        out = match_erf_gelu(ctx, node) if isinstance(ins[0], Tensor) else None
        if out is None:
            return plain(ctx, node, ins, attrs)
        return _bind(ctx, node, out, unary(ctx, "gelu", ins[0]))
    return lower


def lower_gelu(ctx, node, ins, attrs):
    _only(attrs, {"approximate"})
    if attrs.get("approximate", b"none") not in (b"none", "none"):
        raise UnsupportedModelError("attribute 'approximate'='tanh' is not supported")
    return [unary(ctx, "gelu", ins[0])]


def lower_clip(ctx, node, ins, attrs):
    _only(attrs, set())
    lo = ins[1] if len(ins) > 1 and ins[1] is not None else np.float32(-3.402823e38)
    hi = ins[2] if len(ins) > 2 and ins[2] is not None else np.float32(3.402823e38)
    if isinstance(lo, Tensor) or isinstance(hi, Tensor):
        raise UnsupportedModelError("runtime min/max inputs are not supported")
    return [unary(ctx, "clip", ins[0], float(lo), float(hi))]


def lower_batchnorm(ctx, node, ins, attrs):
    """A BatchNormalization not folded into a Conv: y = x * scale + shift per channel."""
    _only(attrs, {"epsilon", "momentum", "training_mode"})
    if attrs.get("training_mode", 0):
        raise UnsupportedModelError("attribute 'training_mode'=1 is not supported")
    x, params = ins[0], ins[1:5]
    if any(not isinstance(p, np.ndarray) for p in params):
        raise UnsupportedModelError("runtime scale/bias/mean/var are not supported")
    scale, shift = _bn_affine(*params, attrs.get("epsilon", 1e-5))
    bshape = (-1,) + (1,) * (len(x.shape) - 2)
    y = binary(ctx, "mul", x, scale.reshape(bshape))
    return [binary(ctx, "add", y, shift.reshape(bshape))]


def _bn_affine(gamma, beta, mean, var, eps):
    scale = (gamma / np.sqrt(var.astype(np.float64) + eps)).astype(np.float32)
    return scale, (beta - mean * scale).astype(np.float32)


# --- convolution ----------------------------------------------------------------------------------
def _conv_geometry(attrs, in_spatial, kernel, name="kernel_shape"):
    nd = len(in_spatial)
    strides = list(attrs.get("strides", [1] * nd))
    dil = list(attrs.get("dilations", [1] * nd))
    pads = list(attrs.get("pads", [0] * (2 * nd)))
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * nd)
        for i in range(nd):
            out = -(-in_spatial[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - in_spatial[i])
            small, big = total // 2, total - total // 2
            pads[i], pads[i + nd] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        pads = [0] * (2 * nd)
    elif auto != "NOTSET":
        raise UnsupportedModelError(f"attribute 'auto_pad'={auto!r} is not supported")
    return strides, dil, pads


def _to_2d(values, fill):
    """1-D geometry as 2-D with a unit leading axis."""
    return [fill] + list(values) if len(values) == 1 else list(values)


def lower_conv(ctx, node, ins, attrs):
    _only(attrs, {"kernel_shape", "strides", "pads", "dilations", "group", "auto_pad"})
    x = ctx.b.as_tensor(ins[0])
    w = ins[1]
    if not isinstance(w, np.ndarray):
        raise UnsupportedModelError("runtime (non-initializer) weights are not supported")
    nd = len(x.shape) - 2
    if nd not in (1, 2):
        raise UnsupportedModelError(f"{nd}-D convolution is not supported (1-D and 2-D are)")
    groups = attrs.get("group", 1)
    cout, cg = w.shape[:2]
    kernel = list(w.shape[2:])
    if x.shape[1] != cg * groups:
        raise UnsupportedModelError(f"input channels {x.shape[1]} != {cg} x group {groups}")
    strides, dil, pads = _conv_geometry(attrs, x.shape[2:], kernel)
    bias = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros(cout, np.float32)
    if isinstance(bias, Tensor):
        raise UnsupportedModelError("runtime bias is not supported")
    w = w.astype(np.float32)
    bias = bias.astype(np.float32)
    out_name = node.output[0]
    bn = ctx.sole_consumer(out_name, ("BatchNormalization",))
    if bn is not None and all(ctx.const(n) is not None for n in bn.input[1:5]) \
            and not attrs_of(bn).get("training_mode", 0):
        scale, shift = _bn_affine(*(ctx.const(n) for n in bn.input[1:5]),
                                  attrs_of(bn).get("epsilon", 1e-5))
        w = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
        bias = bias * scale + shift
        ctx.absorb(bn)
        out_name = bn.output[0]
    out_name, act = fuse_activation(ctx, out_name)

    n, c = x.shape[:2]
    H, W = _to_2d(x.shape[2:], 1)
    KH, KW = _to_2d(kernel, 1)
    sh, sw = _to_2d(strides, 1)
    dh, dw = _to_2d(dil, 1)
    pb = _to_2d(pads[:nd], 0)
    pe = _to_2d(pads[nd:], 0)
    OH = (H + pb[0] + pe[0] - dh * (KH - 1) - 1) // sh + 1
    OW = (W + pb[1] + pe[1] - dw * (KW - 1) - 1) // sw + 1
    out_shape = (n, cout, OW) if nd == 1 else (n, cout, OH, OW)
    y = ctx.b.tensor(out_shape)
    wt, bt = ctx.b.weight(w), ctx.b.weight(bias)
    og = cout // groups
    geometry = [KH, KW, sh, sw, pb[0], pb[1], dh, dw]
    if og >= 16:
        m, k = n * OH * OW, cg * KH * KW
        ctx.b.launch(gemm.conv_implicit(act), gemm.gemm_grid(m, og, groups), (gemm.THREADS, 1, 1),
                     [x, wt, bt, y, m, og, k, c, cg, H, W, cout, OH, OW, *geometry], [y])
    else:
        total = n * cout * OH * OW
        ctx.b.launch(conv_k.conv_direct(act), grid_1d(total), BLOCK,
                     [x, wt, bt, y, n, c, H, W, cout, OH, OW, *geometry, groups], [y])
    ctx.values[out_name] = y
    return [y]


# --- matrix products ------------------------------------------------------------------------------
def _gemm_launch(ctx, a, b, c, out_shape, M, N, K, z, sa, sb, sc, alpha, beta, act):
    y = ctx.b.tensor(out_shape)
    has_c = c is not None
    ctx.b.launch(gemm.matmul(act, has_c), gemm.gemm_grid(M, N, z), (gemm.THREADS, 1, 1),
                 [a, b, c if has_c else a, y, M, N, K, *sa, *sb, *sc, float(alpha), float(beta)],
                 [y])
    return y


def _bias_strides(shape, M, N):
    """Element strides of a bias broadcast to [M, N] (Gemm's C, MatMul's trailing Add)."""
    shape = tuple(shape)
    if _prod(shape) == 1:
        return [0, 0]
    if shape[-1:] == (N,) and _prod(shape) == N:
        return [0, 1]
    if len(shape) == 2 and shape == (M, 1):
        return [1, 0]
    if len(shape) == 2 and shape == (M, N):
        return [N, 1]
    raise UnsupportedModelError(f"bias of shape {shape} does not broadcast to ({M}, {N})")


def lower_gemm(ctx, node, ins, attrs):
    _only(attrs, {"alpha", "beta", "transA", "transB"})
    a, b = ctx.b.as_tensor(ins[0]), ctx.b.as_tensor(ins[1])
    ta, tb = attrs.get("transA", 0), attrs.get("transB", 0)
    M, K = (a.shape[1], a.shape[0]) if ta else a.shape
    K2, N = (b.shape[1], b.shape[0]) if tb else b.shape
    if K != K2:
        raise UnsupportedModelError(f"inner dimensions {K} and {K2} differ")
    sa = [0, 1, M] if ta else [0, K, 1]
    sb = [0, 1, K] if tb else [0, N, 1]
    c = ins[2] if len(ins) > 2 and ins[2] is not None else None
    sc = [0, 0]
    if c is not None:
        sc = _bias_strides(c.shape, M, N)
        c = ctx.b.as_tensor(c)
    out_name, act = fuse_activation(ctx, node.output[0])
    y = _gemm_launch(ctx, a, b, c, (M, N), M, N, K, 1, sa, sb, sc,
                     attrs.get("alpha", 1.0), attrs.get("beta", 1.0), act)
    return _bind(ctx, node, out_name, y)


def lower_matmul(ctx, node, ins, attrs):
    _only(attrs, set())
    a, b = ctx.b.as_tensor(ins[0]), ctx.b.as_tensor(ins[1])
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise UnsupportedModelError("1-D MatMul operands are not supported")
    M, K = a.shape[-2:]
    K2, N = b.shape[-2:]
    if K != K2:
        raise UnsupportedModelError(f"inner dimensions {K} and {K2} differ")
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    abatch, bbatch = _prod(a.shape[:-2]), _prod(b.shape[:-2])
    z = _prod(batch)
    if bbatch == 1:  # [.., M, K] @ [K, N]: fold A's batch into M, one GEMM
        Mz, zz, sa, sb = M * abatch, 1, [0, K, 1], [0, N, 1]
    elif a.shape[:-2] == batch and b.shape[:-2] == batch:
        Mz, zz, sa, sb = M, z, [M * K, K, 1], [K * N, N, 1]
    elif abatch == 1:
        Mz, zz, sa, sb = M, z, [0, K, 1], [K * N, N, 1]
    else:
        raise UnsupportedModelError(
            f"partial batch broadcasting {a.shape} @ {b.shape} is not supported")
    out_name = node.output[0]
    c, sc = None, [0, 0]
    add = ctx.sole_consumer(out_name, ("Add",))
    if add is not None:
        other = add.input[1] if add.input[0] == out_name else add.input[0]
        bias = ctx.const(other)
        if bias is not None and bias.ndim <= 1 and _prod(bias.shape) in (1, N):
            c, sc = ctx.b.weight(bias), _bias_strides(bias.shape, Mz, N)
            ctx.absorb(add)
            out_name = add.output[0]
    out_name, act = fuse_activation(ctx, out_name)
    y = _gemm_launch(ctx, a, b, c, batch + (M, N), Mz, N, K, zz, sa, sb, sc, 1.0, 1.0, act)
    ctx.values[out_name] = y
    return [y]


# --- pooling and reductions -----------------------------------------------------------------------
def _pool(ctx, node, ins, attrs, mode):
    _only(attrs, {"kernel_shape", "strides", "pads", "dilations", "ceil_mode", "auto_pad",
                  "count_include_pad", "storage_order"})
    if attrs.get("storage_order", 0):
        raise UnsupportedModelError("attribute 'storage_order'=1 is not supported")
    if len(node.output) > 1 and node.output[1]:
        raise UnsupportedModelError("the Indices output is not supported")
    x = ctx.b.as_tensor(ins[0])
    nd = len(x.shape) - 2
    if nd not in (1, 2):
        raise UnsupportedModelError(f"{nd}-D pooling is not supported")
    kernel = list(attrs["kernel_shape"])
    strides, dil, pads = _conv_geometry(attrs, x.shape[2:], kernel)
    ceil = attrs.get("ceil_mode", 0)
    dims = []
    for i in range(nd):
        span = x.shape[2 + i] + pads[i] + pads[i + nd] - ((kernel[i] - 1) * dil[i] + 1)
        out = (-(-span // strides[i]) if ceil else span // strides[i]) + 1
        if ceil and (out - 1) * strides[i] >= x.shape[2 + i] + pads[i]:
            out -= 1  # the last window may not start in the right padding
        dims.append(out)
    n, c = x.shape[:2]
    H, W = _to_2d(x.shape[2:], 1)
    OH, OW = _to_2d(dims, 1)
    KH, KW = _to_2d(kernel, 1)
    sh, sw = _to_2d(strides, 1)
    dh, dw = _to_2d(dil, 1)
    ph, pw = _to_2d(pads[:nd], 0)
    y = ctx.b.tensor((n, c, *dims))
    total = n * c * OH * OW
    ctx.b.launch(pool.pool(mode), grid_1d(total), BLOCK,
                 [x, y, n * c, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw,
                  int(attrs.get("count_include_pad", 0))], [y])
    return [y]


def _rows_reduce(ctx, x: Tensor, outer: int, L: int, inner: int, out_shape) -> Tensor:
    y = ctx.b.tensor(out_shape)
    ctx.b.launch(rows.reduce_mean(), rows.row_grid(outer * inner), BLOCK,
                 [x, y, outer * inner, L, inner], [y])
    return y


def lower_global_avg_pool(ctx, node, ins, attrs):
    _only(attrs, set())
    x = ctx.b.as_tensor(ins[0])
    n, c = x.shape[:2]
    return [_rows_reduce(ctx, x, n * c, _prod(x.shape[2:]), 1, (n, c) + (1,) * (len(x.shape) - 2))]


def lower_reduce_mean(ctx, node, ins, attrs):
    _only(attrs, {"axes", "keepdims", "noop_with_empty_axes"})
    x = ctx.b.as_tensor(ins[0])
    rank = len(x.shape)
    axes = attrs.get("axes")
    if len(ins) > 1 and ins[1] is not None:
        if isinstance(ins[1], Tensor):
            raise UnsupportedModelError("runtime axes are not supported")
        axes = ins[1].tolist()
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(rank))
    axes = sorted(_axis(a, rank) for a in axes)
    if axes != list(range(axes[0], axes[-1] + 1)):
        raise UnsupportedModelError(f"non-contiguous axes {axes} are not supported")
    outer, L = _prod(x.shape[:axes[0]]), _prod(x.shape[axes[0]:axes[-1] + 1])
    inner = _prod(x.shape[axes[-1] + 1:])
    if attrs.get("keepdims", 1):
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [_rows_reduce(ctx, x, outer, L, inner, shape)]


def lower_softmax(ctx, node, ins, attrs, log=False):
    _only(attrs, {"axis"})
    x = ctx.b.as_tensor(ins[0])
    ax = _axis(attrs.get("axis", -1), len(x.shape))
    outer, L, inner = _prod(x.shape[:ax]), x.shape[ax], _prod(x.shape[ax + 1:])
    y = ctx.b.tensor(x.shape)
    ctx.b.launch(rows.softmax(log), rows.row_grid(outer * inner), BLOCK,
                 [x, y, outer * inner, L, inner], [y])
    return [y]


def lower_layer_norm(ctx, node, ins, attrs):
    _only(attrs, {"axis", "epsilon", "stash_type"})
    if any(node.output[1:]):
        raise UnsupportedModelError("the Mean/InvStdDev outputs are not supported")
    x = ctx.b.as_tensor(ins[0])
    ax = _axis(attrs.get("axis", -1), len(x.shape))
    outer, L = _prod(x.shape[:ax]), _prod(x.shape[ax:])
    scale = ins[1]
    bias = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros(x.shape[ax:], np.float32)
    for p in (scale, bias):
        if not isinstance(p, np.ndarray) or _prod(p.shape) != L:
            raise UnsupportedModelError("scale/bias must be constants of the normalised shape")
    y = ctx.b.tensor(x.shape)
    ctx.b.launch(rows.layer_norm(), rows.row_grid(outer), BLOCK,
                 [x, ctx.b.weight(scale), ctx.b.weight(bias), y, outer, L, 1,
                  float(attrs.get("epsilon", 1e-5))], [y])
    return [y]


# --- layout ---------------------------------------------------------------------------------------
def lower_transpose(ctx, node, ins, attrs):
    _only(attrs, {"perm"})
    x = ctx.b.as_tensor(ins[0])
    perm = list(attrs["perm"]) if "perm" in attrs else list(range(len(x.shape)))[::-1]
    xs = contiguous_strides(x.shape)
    shape = tuple(x.shape[p] for p in perm)
    y = ctx.b.tensor(shape)
    copy(ctx, x, y, shape, 0, [xs[p] for p in perm], 0, contiguous_strides(shape))
    return [y]


def lower_concat(ctx, node, ins, attrs):
    _only(attrs, {"axis"})
    rank = len(next(v.shape for v in ins if v is not None))
    ax = _axis(attrs["axis"], rank)
    parts = [ctx.b.as_tensor(v) for v in ins if v is not None and _prod(v.shape) > 0]
    shape = list(parts[0].shape)
    shape[ax] = sum(p.shape[ax] for p in parts)
    y = ctx.b.tensor(shape)
    ys = contiguous_strides(shape)
    at = 0
    for p in parts:
        copy(ctx, p, y, p.shape, 0, contiguous_strides(p.shape), at * ys[ax], ys)
        at += p.shape[ax]
    return [y]


def lower_split(ctx, node, ins, attrs):
    _only(attrs, {"axis", "num_outputs"})
    x = ctx.b.as_tensor(ins[0])
    ax = _axis(attrs.get("axis", 0), len(x.shape))
    if len(ins) > 1 and ins[1] is not None:
        if isinstance(ins[1], Tensor):
            raise UnsupportedModelError("runtime split sizes are not supported")
        sizes = [int(s) for s in ins[1]]
    else:
        k = len(node.output)
        step = -(-x.shape[ax] // k)
        sizes = [min(step, x.shape[ax] - i * step) for i in range(k)]
    xs = contiguous_strides(x.shape)
    outs, at = [], 0
    for size in sizes:
        shape = list(x.shape)
        shape[ax] = size
        y = ctx.b.tensor(shape)
        copy(ctx, x, y, shape, at * xs[ax], xs, 0, contiguous_strides(shape))
        outs.append(y)
        at += size
    return outs


def lower_slice(ctx, node, ins, attrs):
    _only(attrs, set())
    x = ctx.b.as_tensor(ins[0])
    if any(isinstance(v, Tensor) for v in ins[1:]):
        raise UnsupportedModelError("runtime starts/ends/axes/steps are not supported")
    rank = len(x.shape)
    starts, ends = ins[1].tolist(), ins[2].tolist()
    axes = ins[3].tolist() if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = ins[4].tolist() if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    xs = contiguous_strides(x.shape)
    shape, strides, offset = list(x.shape), list(xs), 0
    for st, en, ax, step in zip(starts, ends, axes, steps):
        ax = _axis(ax, rank)
        idx = range(x.shape[ax])[slice(st, en, step)]  # Python's slice clamping is ONNX's
        shape[ax] = len(idx)
        strides[ax] = xs[ax] * step
        offset += (idx.start if len(idx) else 0) * xs[ax]
    y = ctx.b.tensor(shape)
    copy(ctx, x, y, shape, offset, strides, 0, contiguous_strides(shape))
    return [y]


def lower_gather(ctx, node, ins, attrs):
    _only(attrs, {"axis"})
    x, idx = ctx.b.as_tensor(ins[0]), ins[1]
    if isinstance(idx, Tensor):
        raise UnsupportedModelError("runtime indices are not supported")
    ax = _axis(attrs.get("axis", 0), len(x.shape))
    flat = np.where(idx < 0, idx + x.shape[ax], idx).reshape(-1)
    xs = contiguous_strides(x.shape)
    piece = list(x.shape)
    piece[ax] = 1
    out_shape = list(x.shape[:ax]) + list(idx.shape) + list(x.shape[ax + 1:])
    y = ctx.b.tensor(out_shape)
    staged = list(x.shape)
    staged[ax] = len(flat)
    ys = contiguous_strides(staged)
    for j, i in enumerate(flat):
        copy(ctx, x, y, piece, int(i) * xs[ax], xs, j * ys[ax], ys)
    return [y]


def lower_pad(ctx, node, ins, attrs):
    _only(attrs, {"mode"})
    mode = attrs.get("mode", b"constant")
    if mode not in (b"constant", "constant"):
        raise UnsupportedModelError(f"attribute 'mode'={mode!r} is not supported")
    x = ctx.b.as_tensor(ins[0])
    if any(isinstance(v, Tensor) for v in ins[1:]):
        raise UnsupportedModelError("runtime pads/value/axes are not supported")
    rank = len(x.shape)
    raw = ins[1].tolist()
    axes = ins[3].tolist() if len(ins) > 3 and ins[3] is not None else list(range(rank))
    k = len(axes)
    begin, end = [0] * rank, [0] * rank
    for j, ax in enumerate(axes):
        begin[_axis(ax, rank)], end[_axis(ax, rank)] = raw[j], raw[j + k]
    if min(begin + end) < 0:
        raise UnsupportedModelError("negative pads are not supported")
    value = float(ins[2]) if len(ins) > 2 and ins[2] is not None and ins[2].size else 0.0
    shape = [d + b + e for d, b, e in zip(x.shape, begin, end)]
    y = ctx.b.tensor(shape)
    n = _prod(shape)
    ctx.b.launch(elementwise.fill(), grid_1d(n), BLOCK, [y, n, value], [y])
    ys = contiguous_strides(shape)
    copy(ctx, x, y, x.shape, 0, contiguous_strides(x.shape),
         sum(b * s for b, s in zip(begin, ys)), ys)
    return [y]


def lower_expand(ctx, node, ins, attrs):
    _only(attrs, set())
    x = ctx.b.as_tensor(ins[0])
    if isinstance(ins[1], Tensor):
        raise UnsupportedModelError("runtime shape is not supported")
    shape = tuple(np.broadcast_shapes(x.shape, tuple(int(d) for d in ins[1])))
    dims, _ = pad_shape(shape)
    xd, xs = pad_shape(x.shape)
    y = ctx.b.tensor(shape)
    copy(ctx, x, y, dims, 0, [0 if a == 1 and b != 1 else s for a, b, s in zip(xd, dims, xs)], 0,
         contiguous_strides(dims))
    return [y]


# --- views (no launch) ----------------------------------------------------------------------------
def lower_reshape(ctx, node, ins, attrs):
    _only(attrs, {"allowzero"})
    x = ctx.b.as_tensor(ins[0])
    if isinstance(ins[1], Tensor):
        raise UnsupportedModelError("runtime shape is not supported")
    shape = [int(d) for d in ins[1]]
    if not attrs.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    if -1 in shape:
        known = _prod([d for d in shape if d != -1])
        shape[shape.index(-1)] = _prod(x.shape) // max(known, 1)
    return [ctx.b.alias(x, shape)]


def lower_flatten(ctx, node, ins, attrs):
    _only(attrs, {"axis"})
    x = ctx.b.as_tensor(ins[0])
    ax = attrs.get("axis", 1)
    ax = ax % len(x.shape) if ax < 0 else ax
    return [ctx.b.alias(x, (_prod(x.shape[:ax]), _prod(x.shape[ax:])))]


def _axes_input(ins, attrs):
    if len(ins) > 1 and ins[1] is not None:
        if isinstance(ins[1], Tensor):
            raise UnsupportedModelError("runtime axes are not supported")
        return [int(a) for a in ins[1]]
    return list(attrs.get("axes", []))


def lower_squeeze(ctx, node, ins, attrs):
    _only(attrs, {"axes"})
    x = ctx.b.as_tensor(ins[0])
    axes = {_axis(a, len(x.shape)) for a in _axes_input(ins, attrs)}
    if not axes:
        axes = {i for i, d in enumerate(x.shape) if d == 1}
    return [ctx.b.alias(x, [d for i, d in enumerate(x.shape) if i not in axes])]


def lower_unsqueeze(ctx, node, ins, attrs):
    _only(attrs, {"axes"})
    x = ctx.b.as_tensor(ins[0])
    rank = len(x.shape) + len(_axes_input(ins, attrs))
    axes = {_axis(a, rank) for a in _axes_input(ins, attrs)}
    dims = iter(x.shape)
    return [ctx.b.alias(x, [1 if i in axes else next(dims) for i in range(rank)])]


def lower_identity(ctx, node, ins, attrs):
    _only(attrs, {"seed"})  # Dropout's seed is irrelevant at inference
    x = ctx.b.as_tensor(ins[0])
    return [x] + [None] * (len(node.output) - 1)


def lower_cast(ctx, node, ins, attrs):
    _only(attrs, {"to", "saturate"})
    if attrs.get("to") != 1:
        raise UnsupportedModelError(f"attribute 'to'={attrs.get('to')} (only float32 at run time)")
    return [ctx.b.as_tensor(ins[0])]


LOWERINGS = {
    "Relu": _unary_op("relu"),
    "Sigmoid": lower_sigmoid,
    "HardSigmoid": _unary_op("hardsigmoid", (0.2, 0.5)),
    "HardSwish": _unary_op("hardswish"),
    "LeakyRelu": _unary_op("leakyrelu", (0.01, 0.0)),
    "Erf": _unary_op("erf"),
    "Tanh": _unary_op("tanh"),
    "Exp": _unary_op("exp"),
    "Log": _unary_op("log"),
    "Sqrt": _unary_op("sqrt"),
    "Neg": _unary_op("neg"),
    "Abs": _unary_op("abs"),
    "Reciprocal": _unary_op("reciprocal"),
    "Gelu": lower_gelu,
    "Clip": lower_clip,
    "Add": _binary_op("add"),
    "Sub": _binary_op("sub"),
    "Mul": _scaling_op("mul"),
    "Div": _scaling_op("div"),
    "Pow": _binary_op("pow"),
    "Max": _binary_op("max"),
    "Min": _binary_op("min"),
    "BatchNormalization": lower_batchnorm,
    "Conv": lower_conv,
    "Gemm": lower_gemm,
    "MatMul": lower_matmul,
    "MaxPool": lambda c, n, i, a: _pool(c, n, i, a, "max"),
    "AveragePool": lambda c, n, i, a: _pool(c, n, i, a, "avg"),
    "GlobalAveragePool": lower_global_avg_pool,
    "ReduceMean": lower_reduce_mean,
    "Softmax": lower_softmax,
    "LogSoftmax": lambda c, n, i, a: lower_softmax(c, n, i, a, log=True),
    "LayerNormalization": lower_layer_norm,
    "Transpose": lower_transpose,
    "Concat": lower_concat,
    "Split": lower_split,
    "Slice": lower_slice,
    "Gather": lower_gather,
    "Pad": lower_pad,
    "Expand": lower_expand,
    "Reshape": lower_reshape,
    "Flatten": lower_flatten,
    "Squeeze": lower_squeeze,
    "Unsqueeze": lower_unsqueeze,
    "Identity": lower_identity,
    "Dropout": lower_identity,
    "Cast": lower_cast,
}
