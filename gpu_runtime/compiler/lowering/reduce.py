"""Lowering of pooling and row reductions: Max/AveragePool, GlobalAveragePool, ReduceMean,
(Log)Softmax, LayerNormalization."""

from __future__ import annotations

import numpy as np

from gpu_runtime.compiler.graph import Tensor, UnsupportedModelError
from gpu_runtime.compiler.lowering.common import BLOCK, axis_index, only_attrs, prod
from gpu_runtime.compiler.lowering.conv import conv_geometry, to_2d
from gpu_runtime.kernels import pool, rows
from gpu_runtime.kernels.source import grid_1d


def lower_pool(ctx, node, ins, attrs, mode):
    only_attrs(attrs, {"kernel_shape", "strides", "pads", "dilations", "ceil_mode", "auto_pad",
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
    strides, dil, pads = conv_geometry(attrs, x.shape[2:], kernel)
    ceil = attrs.get("ceil_mode", 0)
    dims = []
    for i in range(nd):
        span = x.shape[2 + i] + pads[i] + pads[i + nd] - ((kernel[i] - 1) * dil[i] + 1)
        out = (-(-span // strides[i]) if ceil else span // strides[i]) + 1
        if ceil and (out - 1) * strides[i] >= x.shape[2 + i] + pads[i]:
            out -= 1  # the last window may not start in the right padding
        dims.append(out)
    n, c = x.shape[:2]
    H, W = to_2d(x.shape[2:], 1)
    OH, OW = to_2d(dims, 1)
    KH, KW = to_2d(kernel, 1)
    sh, sw = to_2d(strides, 1)
    dh, dw = to_2d(dil, 1)
    ph, pw = to_2d(pads[:nd], 0)
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
    only_attrs(attrs, set())
    x = ctx.b.as_tensor(ins[0])
    n, c = x.shape[:2]
    return [_rows_reduce(ctx, x, n * c, prod(x.shape[2:]), 1, (n, c) + (1,) * (len(x.shape) - 2))]


def lower_reduce_mean(ctx, node, ins, attrs):
    only_attrs(attrs, {"axes", "keepdims", "noop_with_empty_axes"})
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
    axes = sorted(axis_index(a, rank) for a in axes)
    if axes != list(range(axes[0], axes[-1] + 1)):
        raise UnsupportedModelError(f"non-contiguous axes {axes} are not supported")
    outer, L = prod(x.shape[:axes[0]]), prod(x.shape[axes[0]:axes[-1] + 1])
    inner = prod(x.shape[axes[-1] + 1:])
    if attrs.get("keepdims", 1):
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [_rows_reduce(ctx, x, outer, L, inner, shape)]


def lower_softmax(ctx, node, ins, attrs, log=False):
    only_attrs(attrs, {"axis"})
    x = ctx.b.as_tensor(ins[0])
    ax = axis_index(attrs.get("axis", -1), len(x.shape))
    outer, L, inner = prod(x.shape[:ax]), x.shape[ax], prod(x.shape[ax + 1:])
    y = ctx.b.tensor(x.shape)
    ctx.b.launch(rows.softmax(log), rows.row_grid(outer * inner), BLOCK,
                 [x, y, outer * inner, L, inner], [y])
    return [y]


def lower_layer_norm(ctx, node, ins, attrs):
    only_attrs(attrs, {"axis", "epsilon", "stash_type"})
    if any(node.output[1:]):
        raise UnsupportedModelError("the Mean/InvStdDev outputs are not supported")
    x = ctx.b.as_tensor(ins[0])
    ax = axis_index(attrs.get("axis", -1), len(x.shape))
    outer, L = prod(x.shape[:ax]), prod(x.shape[ax:])
    scale = ins[1]
    bias = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros(x.shape[ax:], np.float32)
    for p in (scale, bias):
        if not isinstance(p, np.ndarray) or prod(p.shape) != L:
            raise UnsupportedModelError("scale/bias must be constants of the normalised shape")
    y = ctx.b.tensor(x.shape)
    ctx.b.launch(rows.layer_norm(), rows.row_grid(outer), BLOCK,
                 [x, ctx.b.weight(scale), ctx.b.weight(bias), y, outer, L, 1,
                  float(attrs.get("epsilon", 1e-5))], [y])
    return [y]
