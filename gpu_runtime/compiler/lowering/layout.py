"""Lowering of data movement: Transpose, Slice, Split, Gather (constant indices) and Expand are
views (no launch); Concat is a view when its parts are views of one buffer, else its parts are
produced straight into the output (their kernels redirected) or copied in; Pad fills and copies."""

from __future__ import annotations

import numpy as np

from gpu_runtime.compiler import view as V
from gpu_runtime.compiler.graph import UnsupportedModelError, View
from gpu_runtime.compiler.lowering.common import EwiseCall, as_view, axis_index, only_attrs, prod
from gpu_runtime.kernels import elementwise
from gpu_runtime.kernels.source import grid_1d


def _runtime(v) -> bool:
    return not isinstance(v, np.ndarray)


def lower_transpose(ctx, node, ins, attrs):
    only_attrs(attrs, {"perm"})
    x = as_view(ctx, ins[0])
    perm = list(attrs["perm"]) if "perm" in attrs else list(range(len(x.shape)))[::-1]
    return [V.transpose(x, perm) or V.transpose(V.of(ctx.tensor(x, node.input[0])), perm)]


def _produce_into(ctx, name: str, v: View, dest: View) -> bool:
    """Redirects the exclusive producer of the value `name` (seen as v) to write through `dest`
    (a view of another buffer with v's shape)."""
    hit = ctx.patchable(name)
    if hit is None:
        return False
    target = V.invert(hit[1], dest)
    new = hit[0].with_destination(target) if target is not None else None
    if new is None:
        return False
    ctx.b.replace(hit[0], new, patchable=False)
    return True


def lower_concat(ctx, node, ins, attrs):
    only_attrs(attrs, {"axis"})
    rank = len(next(v.shape for v in ins if v is not None))
    ax = axis_index(attrs["axis"], rank)
    parts = [(name, as_view(ctx, v)) for name, v in zip(node.input, ins)
             if v is not None and prod(v.shape) > 0]
    joined = V.concat([v for _, v in parts], ax)
    if joined is not None:
        return [joined]
    shape = list(parts[0][1].shape)
    shape[ax] = sum(v.shape[ax] for _, v in parts)
    y = ctx.b.tensor(shape, dtype=ctx.out_dtype(node.output[0]))
    at = 0
    for name, v in parts:
        dest = V.narrow(V.of(y), ax, at, v.shape[ax])
        if not _produce_into(ctx, name, v, dest):
            ctx.b.emit(EwiseCall("copy", "none", (v,), dest), patchable=False)
        at += v.shape[ax]
    return [y]


def lower_split(ctx, node, ins, attrs):
    only_attrs(attrs, {"axis", "num_outputs"})
    x = as_view(ctx, ins[0])
    ax = axis_index(attrs.get("axis", 0), len(x.shape))
    if len(ins) > 1 and ins[1] is not None:
        if _runtime(ins[1]):
            raise UnsupportedModelError("runtime split sizes are not supported")
        sizes = [int(s) for s in ins[1]]
    else:
        k = len(node.output)
        step = -(-x.shape[ax] // k)
        sizes = [min(step, x.shape[ax] - i * step) for i in range(k)]
    outs, at = [], 0
    for size in sizes:
        outs.append(V.narrow(x, ax, at, size))
        at += size
    return outs


def lower_slice(ctx, node, ins, attrs):
    only_attrs(attrs, set())
    x = as_view(ctx, ins[0])
    if any(_runtime(v) for v in ins[1:] if v is not None):
        raise UnsupportedModelError("runtime starts/ends/axes/steps are not supported")
    rank = len(x.shape)
    starts, ends = ins[1].tolist(), ins[2].tolist()
    axes = ins[3].tolist() if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = ins[4].tolist() if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    for st, en, ax, step in zip(starts, ends, axes, steps):
        ax = axis_index(ax, rank)
        idx = range(x.shape[ax])[slice(st, en, step)]  # Python's slice clamping is ONNX's
        x = V.narrow(x, ax, idx.start if len(idx) else 0, len(idx), step)
    return [x]


def lower_gather(ctx, node, ins, attrs):
    only_attrs(attrs, {"axis"})
    x, idx = as_view(ctx, ins[0]), ins[1]
    if _runtime(idx):
        raise UnsupportedModelError("runtime indices are not supported")
    ax = axis_index(attrs.get("axis", 0), len(x.shape))
    idx = np.where(idx < 0, idx + x.shape[ax], idx)
    taken = V.take(x, ax, idx)
    if taken is None:
        taken = V.take(V.of(ctx.tensor(x, node.input[0])), ax, idx)
    if taken is None:
        raise UnsupportedModelError(f"gather of {idx.size} indices needs too large a table")
    return [taken]


def lower_pad(ctx, node, ins, attrs):
    only_attrs(attrs, {"mode"})
    mode = attrs.get("mode", b"constant")
    if mode not in (b"constant", "constant"):
        raise UnsupportedModelError(f"attribute 'mode'={mode!r} is not supported")
    x = as_view(ctx, ins[0])
    if any(_runtime(v) for v in ins[1:] if v is not None):
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
    y = ctx.b.tensor(shape, dtype=ctx.out_dtype(node.output[0]))
    n = prod(shape)
    ctx.b.launch(elementwise.fill(y.dtype), grid_1d(n), (256, 1, 1), [y, n, value], [y])
    dest = V.of(y)
    for ax in range(rank):
        dest = V.narrow(dest, ax, begin[ax], x.shape[ax])
    ctx.b.emit(EwiseCall("copy", "none", (x,), dest), patchable=False)
    return [y]


def lower_expand(ctx, node, ins, attrs):
    only_attrs(attrs, set())
    x = as_view(ctx, ins[0])
    if _runtime(ins[1]):
        raise UnsupportedModelError("runtime shape is not supported")
    shape = tuple(np.broadcast_shapes(x.shape, tuple(int(d) for d in ins[1])))
    return [V.broadcast_to(x, shape)]
