"""Lowering of data movement: Transpose, Concat, Split, Slice, Gather, Pad and Expand, all through
the strided copy (Pad also fills)."""

from __future__ import annotations

import numpy as np

from gpu_runtime.compiler.graph import Tensor, UnsupportedModelError
from gpu_runtime.compiler.lowering.common import BLOCK, axis_index, copy, only_attrs, prod
from gpu_runtime.kernels import elementwise
from gpu_runtime.kernels.source import contiguous_strides, grid_1d, pad_shape


def lower_transpose(ctx, node, ins, attrs):
    only_attrs(attrs, {"perm"})
    x = ctx.b.as_tensor(ins[0])
    perm = list(attrs["perm"]) if "perm" in attrs else list(range(len(x.shape)))[::-1]
    xs = contiguous_strides(x.shape)
    shape = tuple(x.shape[p] for p in perm)
    y = ctx.b.tensor(shape)
    copy(ctx, x, y, shape, 0, [xs[p] for p in perm], 0, contiguous_strides(shape))
    return [y]


def lower_concat(ctx, node, ins, attrs):
    only_attrs(attrs, {"axis"})
    rank = len(next(v.shape for v in ins if v is not None))
    ax = axis_index(attrs["axis"], rank)
    parts = [ctx.b.as_tensor(v) for v in ins if v is not None and prod(v.shape) > 0]
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
    only_attrs(attrs, {"axis", "num_outputs"})
    x = ctx.b.as_tensor(ins[0])
    ax = axis_index(attrs.get("axis", 0), len(x.shape))
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
    only_attrs(attrs, set())
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
        ax = axis_index(ax, rank)
        idx = range(x.shape[ax])[slice(st, en, step)]  # Python's slice clamping is ONNX's
        shape[ax] = len(idx)
        strides[ax] = xs[ax] * step
        offset += (idx.start if len(idx) else 0) * xs[ax]
    y = ctx.b.tensor(shape)
    copy(ctx, x, y, shape, offset, strides, 0, contiguous_strides(shape))
    return [y]


def lower_gather(ctx, node, ins, attrs):
    only_attrs(attrs, {"axis"})
    x, idx = ctx.b.as_tensor(ins[0]), ins[1]
    if isinstance(idx, Tensor):
        raise UnsupportedModelError("runtime indices are not supported")
    ax = axis_index(attrs.get("axis", 0), len(x.shape))
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
    only_attrs(attrs, {"mode"})
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
        begin[axis_index(ax, rank)], end[axis_index(ax, rank)] = raw[j], raw[j + k]
    if min(begin + end) < 0:
        raise UnsupportedModelError("negative pads are not supported")
    value = float(ins[2]) if len(ins) > 2 and ins[2] is not None and ins[2].size else 0.0
    shape = [d + b + e for d, b, e in zip(x.shape, begin, end)]
    y = ctx.b.tensor(shape)
    n = prod(shape)
    ctx.b.launch(elementwise.fill(), grid_1d(n), BLOCK, [y, n, value], [y])
    ys = contiguous_strides(shape)
    copy(ctx, x, y, x.shape, 0, contiguous_strides(x.shape),
         sum(b * s for b, s in zip(begin, ys)), ys)
    return [y]


def lower_expand(ctx, node, ins, attrs):
    only_attrs(attrs, set())
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
