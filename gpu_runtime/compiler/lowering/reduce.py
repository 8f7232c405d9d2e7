"""Lowering of pooling and row reductions: Max/AveragePool (window kernels), GlobalAveragePool
and ReduceMean (row means, or a whole squeeze-excitation block in one launch), (Log)Softmax and
LayerNormalization."""

from __future__ import annotations

import numpy as np

from gpu_runtime.compiler.graph import Tensor, UnsupportedModelError, attrs_of
from gpu_runtime.compiler.lowering.common import axis_index, only_attrs, prod
from gpu_runtime.compiler.lowering.conv import WindowCall, conv_geometry, window_call
from gpu_runtime.kernels import rows, se


def lower_pool(ctx, node, ins, attrs, mode):
    only_attrs(attrs, {"kernel_shape", "strides", "pads", "dilations", "ceil_mode", "auto_pad",
                       "count_include_pad", "storage_order"})
    if attrs.get("storage_order", 0):
        raise UnsupportedModelError("attribute 'storage_order'=1 is not supported")
    if len(node.output) > 1 and node.output[1]:
        raise UnsupportedModelError("the Indices output is not supported")
    x = ctx.tensor(ins[0], node.input[0])
    nd = len(x.shape) - 2
    if nd not in (1, 2):
        raise UnsupportedModelError(f"{nd}-D pooling is not supported")
    kernel = list(attrs["kernel_shape"])
    strides, dil, pads = conv_geometry(attrs, x.shape[2:], kernel)
    ceil = attrs.get("ceil_mode", 0)
    dims = []
    for i in range(nd):
        span = x.shape[2 + i] + pads[i] + pads[i + nd] - ((kernel[i] - 1) * dil[i] + 1)
        out = (-(-span // strides[i]) if ceil else span // strides[i]) + 1
        if ceil and (out - 1) * strides[i] >= x.shape[2 + i] + pads[i]:
            out -= 1  # the last window may not start in the right padding
        dims.append(out)
    return [window_call(ctx, mode, x, node.output[0], kernel, strides, dil, pads[:nd], dims,
                        include_pad=int(attrs.get("count_include_pad", 0)))]


def rows_launch(ctx, op: str, x: Tensor, outer: int, L: int, inner: int, out_shape,
                out_name: str | None, gamma=None, beta=None, eps: float = 0.0) -> Tensor:
    y = ctx.b.tensor(out_shape, dtype=ctx.out_dtype(out_name))
    shape = rows.shape_of(L, inner)
    per = -(-L // 32) if shape == "warp" else 0
    g = ctx.b.weight(gamma) if gamma is not None else ctx.b.dummy(ctx.b.dtype)
    b = ctx.b.weight(beta) if beta is not None else ctx.b.dummy(ctx.b.dtype)
    kernel = rows.rows_kernel(op, shape, per, (x.dtype, g.dtype, y.dtype))
    grid, block = rows.grid(shape, outer * inner)
    ctx.b.launch(kernel, grid, block, [x, g, b, y, outer * inner, L, inner, float(eps)], [y])
    return y


def _squeeze_excite(ctx, node, x: Tensor, spatial: int):
    """pool -> 1x1 conv -> act -> 1x1 conv -> act, all of whose results feed only the next step:
    one launch computing the per-channel scale [N, C, 1...] (the ending act's output)."""
    chain, name = [], node.output[0]
    for ops in (("Conv",), ("Relu",), ("Conv",), ("HardSigmoid", "Sigmoid")):
        nxt = ctx.sole_consumer(name, ops)
        if nxt is None:
            return None
        chain.append(nxt)
        name = nxt.output[0]
    c1, act1, c2, act2 = chain
    params = []
    for conv in (c1, c2):
        w = ctx.const(conv.input[1])
        b = ctx.const(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
        a = attrs_of(conv)
        if w is None or a.get("group", 1) != 1 or any(d != 1 for d in w.shape[2:]) \
                or any(p for p in a.get("pads", [])) or any(s != 1 for s in a.get("strides", [])):
            return None
        params.append((w.reshape(w.shape[0], w.shape[1]).astype(np.float32),
                       (b if b is not None else np.zeros(w.shape[0])).astype(np.float32)))
    (w1, b1), (w2, b2) = params
    n, c = x.shape[:2]
    if w1.shape[1] != c or w2.shape[0] != c or c + w1.shape[0] > se.MAX_CHANNELS:
        return None
    a2 = attrs_of(act2)
    if act2.op_type == "HardSigmoid" and (abs(a2.get("alpha", 0.2) - 1 / 6) > 1e-6
                                          or abs(a2.get("beta", 0.5) - 0.5) > 1e-6):
        return None
    for nd in chain:
        ctx.absorb(nd)
    producer = ctx.b.producer(x)
    if isinstance(producer, WindowCall) and producer.mode == "conv" and producer.dest.plain:
        # the depthwise kernel leaves per-tile sums: the SE never re-reads the activation
        call = producer.with_partials(ctx.b)
        ctx.b.replace(producer, call)
        source, per_channel = call.partials, call.partials.shape[-1]
    else:
        source, per_channel = x, spatial
    s = ctx.b.tensor((n, c) + (1,) * (len(x.shape) - 2))
    kernel = se.se("relu", "hardsigmoid" if act2.op_type == "HardSigmoid" else "sigmoid",
                   (source.dtype, ctx.b.dtype, s.dtype))
    ctx.b.launch(kernel, (n, 1, 1), (se.THREADS, 1, 1),
                 [source, ctx.b.weight(w1), ctx.b.weight(b1), ctx.b.weight(w2), ctx.b.weight(b2), s,
                  c, w1.shape[0], per_channel, spatial], [s])
    ctx.values[act2.output[0]] = s
    return [s]


def _mean(ctx, node, x: Tensor, outer: int, L: int, inner: int, shape) -> list:
    if inner == 1:
        fused = _squeeze_excite(ctx, node, x, L)
        if fused is not None:
            return fused
    return [rows_launch(ctx, "mean", x, outer, L, inner, shape, node.output[0])]


def lower_global_avg_pool(ctx, node, ins, attrs):
    only_attrs(attrs, set())
    x = ctx.tensor(ins[0], node.input[0])
    n, c = x.shape[:2]
    return _mean(ctx, node, x, n * c, prod(x.shape[2:]), 1, (n, c) + (1,) * (len(x.shape) - 2))


def lower_reduce_mean(ctx, node, ins, attrs):
    only_attrs(attrs, {"axes", "keepdims", "noop_with_empty_axes"})
    x = ctx.tensor(ins[0], node.input[0])
    rank = len(x.shape)
    axes = attrs.get("axes")
    if len(ins) > 1 and ins[1] is not None:
        if not isinstance(ins[1], np.ndarray):
            raise UnsupportedModelError("runtime axes are not supported")
        axes = ins[1].tolist()
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(rank))
    axes = sorted(axis_index(a, rank) for a in axes)
    if axes != list(range(axes[0], axes[-1] + 1)):
        raise UnsupportedModelError(f"non-contiguous axes {axes} are not supported")
    outer, L = prod(x.shape[:axes[0]]), prod(x.shape[axes[0]:axes[-1] + 1])
    inner = prod(x.shape[axes[-1] + 1:])
    if attrs.get("keepdims", 1):
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return _mean(ctx, node, x, outer, L, inner, shape)


def lower_softmax(ctx, node, ins, attrs, log=False):
    only_attrs(attrs, {"axis"})
    x = ctx.tensor(ins[0], node.input[0])
    ax = axis_index(attrs.get("axis", -1), len(x.shape))
    outer, L, inner = prod(x.shape[:ax]), x.shape[ax], prod(x.shape[ax + 1:])
    return [rows_launch(ctx, "logsoftmax" if log else "softmax", x, outer, L, inner, x.shape,
                        node.output[0])]


def lower_layer_norm(ctx, node, ins, attrs):
    only_attrs(attrs, {"axis", "epsilon", "stash_type"})
    if any(node.output[1:]):
        raise UnsupportedModelError("the Mean/InvStdDev outputs are not supported")
    x = ctx.tensor(ins[0], node.input[0])
    ax = axis_index(attrs.get("axis", -1), len(x.shape))
    outer, L = prod(x.shape[:ax]), prod(x.shape[ax:])
    scale = ins[1]
    bias = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros(x.shape[ax:], np.float32)
    for p in (scale, bias):
        if not isinstance(p, np.ndarray) or prod(p.shape) != L:
            raise UnsupportedModelError("scale/bias must be constants of the normalised shape")
    return [rows_launch(ctx, "layernorm", x, outer, L, 1, x.shape, node.output[0],
                        scale.astype(np.float32).reshape(-1), bias.astype(np.float32).reshape(-1),
                        float(attrs.get("epsilon", 1e-5)))]
