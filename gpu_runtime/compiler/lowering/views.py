"""Ops that only re-view a value (no launch): Reshape, Flatten, Squeeze, Unsqueeze, Identity,
Dropout and float Cast. A view whose layout no reshape can express is copied first."""

from __future__ import annotations

import numpy as np

from gpu_runtime.compiler import view as V
from gpu_runtime.compiler.graph import UnsupportedModelError
from gpu_runtime.compiler.lowering.common import as_view, axis_index, only_attrs, prod


def reshaped(ctx, name: str, value, shape) -> object:
    """`value` (the value named `name`) as `shape`."""
    shape = tuple(int(d) for d in shape)
    if prod(shape) != prod(value.shape):
        raise UnsupportedModelError(f"cannot view shape {tuple(value.shape)} as {shape}")
    v = as_view(ctx, value)
    return V.reshape(v, shape) or V.reshape(V.of(ctx.tensor(v, name)), shape)


def lower_reshape(ctx, node, ins, attrs):
    only_attrs(attrs, {"allowzero"})
    x = ins[0]
    if not isinstance(ins[1], np.ndarray):
        raise UnsupportedModelError("runtime shape is not supported")
    shape = [int(d) for d in ins[1]]
    if not attrs.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    if -1 in shape:
        known = prod([d for d in shape if d != -1])
        shape[shape.index(-1)] = prod(x.shape) // max(known, 1)
    return [reshaped(ctx, node.input[0], x, shape)]


def lower_flatten(ctx, node, ins, attrs):
    only_attrs(attrs, {"axis"})
    x = ins[0]
    ax = attrs.get("axis", 1)
    ax = ax % len(x.shape) if ax < 0 else ax
    return [reshaped(ctx, node.input[0], x, (prod(x.shape[:ax]), prod(x.shape[ax:])))]


def _axes_input(ins, attrs):
    if len(ins) > 1 and ins[1] is not None:
        if not isinstance(ins[1], np.ndarray):
            raise UnsupportedModelError("runtime axes are not supported")
        return [int(a) for a in ins[1]]
    return list(attrs.get("axes", []))


def lower_squeeze(ctx, node, ins, attrs):
    only_attrs(attrs, {"axes"})
    x = ins[0]
    axes = {axis_index(a, len(x.shape)) for a in _axes_input(ins, attrs)}
    if not axes:
        axes = {i for i, d in enumerate(x.shape) if d == 1}
    return [reshaped(ctx, node.input[0], x, [d for i, d in enumerate(x.shape) if i not in axes])]


def lower_unsqueeze(ctx, node, ins, attrs):
    only_attrs(attrs, {"axes"})
    x = ins[0]
    rank = len(x.shape) + len(_axes_input(ins, attrs))
    axes = {axis_index(a, rank) for a in _axes_input(ins, attrs)}
    dims = iter(x.shape)
    return [reshaped(ctx, node.input[0], x, [1 if i in axes else next(dims) for i in range(rank)])]


def lower_identity(ctx, node, ins, attrs):
    only_attrs(attrs, {"seed"})  # Dropout's seed is irrelevant at inference
    return [ins[0]] + [None] * (len(node.output) - 1)


def lower_cast(ctx, node, ins, attrs):
    """Casts to float are identities: every runtime value is a float (in the program's storage)."""
    only_attrs(attrs, {"to", "saturate"})
    if attrs.get("to") != 1:
        raise UnsupportedModelError(f"attribute 'to'={attrs.get('to')} (only float32 at run time)")
    return [ins[0]]
