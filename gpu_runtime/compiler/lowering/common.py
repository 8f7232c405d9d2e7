"""What every lowering shares: shape and attribute helpers, values as views, the elementwise call
(unary, binary and copy over collapsed strided operands), materialising views (or producing them
in place), and fusing an activation / scale / addend into the producing call."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from gpu_runtime.compiler import view as V
from gpu_runtime.compiler.graph import (Call, GraphContext, Lazy, ProgramBuilder, Tensor,
                                        UnsupportedModelError, View, make_launch)
from gpu_runtime.kernels import elementwise
from gpu_runtime.kernels.source import THREADS, fastdiv, grid_1d

BLOCK = (THREADS, 1, 1)
# ONNX activations an epilogue applies (HardSigmoid only with torch's 1/6, 0.5)
FUSIBLE_ACTS = {"Relu": "relu", "HardSwish": "hardswish", "Gelu": "gelu", "Sigmoid": "sigmoid"}


def prod(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def axis_index(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise UnsupportedModelError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def only_attrs(attrs: dict, allowed: set[str]) -> None:
    extra = sorted(set(attrs) - allowed)
    if extra:
        raise UnsupportedModelError(f"attribute {extra[0]!r} is not supported")


def as_view(ctx: GraphContext, v) -> View:
    """Any value as a view (constants become weights; lazy values are computed)."""
    if isinstance(v, View):
        return v
    return V.of(ctx.tensor(v))


def collapse(shape, views: list[View]):
    """Merges dimensions every view walks contiguously; a leading block of table dimensions
    becomes one row dimension with an int32 table for the views that need one.

    Returns (sizes, [(offset, strides, rows or None)] per view)."""
    shape = [int(d) for d in shape]
    k = max(v.k for v in views)
    ops = []
    if k:
        rows = prod(shape[:k])
        sizes = [rows] + shape[k:]
        for v in views:
            w = V.expand(v, k)
            table = np.broadcast_to(w.table, tuple(shape[:k])).reshape(-1)
            steps = np.diff(table)
            if rows == 1 or np.all(steps == steps[0]):
                step = int(steps[0]) if rows > 1 else 0
                ops.append([int(table[0]), [step] + list(w.strides), None])
            else:
                ops.append([0, [0] + list(w.strides), table])
    else:
        sizes = shape or [1]
        ops = [[v.offset, list(v.strides) or [0], None] for v in views]
    keep = [d for d in range(len(sizes)) if sizes[d] != 1 or (d == 0 and any(o[2] is not None
                                                                            for o in ops))]
    keep = keep or [0]
    sizes = [sizes[d] for d in keep]
    for o in ops:
        o[1] = [o[1][d] for d in keep]
    d = len(sizes) - 2
    while d >= 0:
        table0 = d == 0 and any(o[2] is not None for o in ops)
        if not table0 and all(o[1][d] == o[1][d + 1] * sizes[d + 1] for o in ops):
            sizes[d:d + 2] = [sizes[d] * sizes[d + 1]]
            for o in ops:
                o[1][d:d + 2] = [o[1][d + 1]]
        d -= 1
    return sizes, [(o[0], o[1], o[2]) for o in ops]


@dataclass(frozen=True)
class EwiseCall(Call):
    """y = act(op(inputs...)) written through `dest` (all views share dest's shape)."""

    op: str
    act: str
    inputs: tuple[View, ...]
    dest: View
    alpha: float = 0.0
    beta: float = 0.0

    def launches(self, b: ProgramBuilder):
        views = list(self.inputs) + [self.dest]
        sizes, ops = collapse(self.dest.shape, views)
        n = prod(sizes)
        if n >= 1 << 31:
            raise UnsupportedModelError(f"{n} elements exceed the kernels' 32-bit indexing")
        inner = None
        aligned = all(o % 4 == 0 and all(s % 4 == 0 for s in st[:-1])
                      and (t is None or not np.any(t % 4)) for o, st, t in ops)
        if (sizes[-1] % 4 == 0 and aligned and ops[-1][1][-1] == 1
                and all(st[-1] in (0, 1) for _, st, _ in ops)
                and (len(sizes) > 1 or all(t is None for _, _, t in ops))):
            inner = "".join("c" if st[-1] == 1 else "b" for _, st, _ in ops)
        tables = tuple(t is not None for _, _, t in ops)
        kernel = elementwise.ewise(self.op, self.act, len(sizes), tables, inner,
                                   tuple(v.dtype for v in views))
        iters = list(sizes)
        if inner:
            iters[-1] //= 4
        args = []
        for v, (_, _, t) in zip(views, ops):
            args.append(v.base)
            if t is not None:
                args.append(b.table(t))
        args.append(prod(iters))
        for d in range(1, len(iters)):
            args += [iters[d], *fastdiv(iters[d])]
        for off, strides, _ in ops:
            args += [off, *strides]
        args += [float(self.alpha), float(self.beta)]
        return [make_launch(kernel, grid_1d(prod(iters)), BLOCK, args, [self.dest.base])]

    def with_act(self, act: str):
        return dataclasses.replace(self, act=act) if self.act == "none" else None

    def with_destination(self, dest: View):
        return dataclasses.replace(self, dest=dest)


def ewise(ctx: GraphContext, op: str, inputs: list, out_name: str | None = None,
          alpha: float = 0.0, beta: float = 0.0, shape=None) -> Tensor:
    """One launch of `op` over inputs broadcast together (NumPy rules); a new tensor."""
    views = [as_view(ctx, v) for v in inputs]
    if shape is None:
        try:
            shape = np.broadcast_shapes(*(v.shape for v in views))
        except ValueError:
            raise UnsupportedModelError(
                f"shapes {[v.shape for v in views]} do not broadcast") from None
    views = [V.broadcast_to(v, shape) for v in views]
    y = ctx.b.tensor(shape, dtype=ctx.out_dtype(out_name))
    return ctx.b.emit(EwiseCall(op, "none", tuple(views), V.of(y), alpha, beta))


def materialize_view(ctx: GraphContext, v: View, name: str | None = None,
                     dtype: str | None = None) -> Tensor:
    """A buffer with the contents of `v`: an alias when v is a 4-aligned contiguous run; the producer
    writing straight into a new buffer in v's layout when v (named `name`) is an exclusive view
    of a still-patchable result; otherwise one copy launch."""
    dtype = dtype or v.dtype
    if dtype == v.dtype:
        off = v.contiguous_offset()
        # kernels check 4-element alignment relative to the buffers they get: an alias must
        # start 4-aligned itself, or a 4-wide access through it could be misaligned on the GPU
        if off is not None and off % 4 == 0:
            if off == 0 and tuple(v.shape) == tuple(v.base.shape):
                return v.base
            return ctx.b.alias(v.base, v.shape, off)
        if name is not None:
            hit = ctx.patchable(name)
            if hit is not None:
                t = ctx.b.tensor(v.shape, dtype=dtype)
                dest = V.invert(hit[1], V.of(t))
                new = hit[0].with_destination(dest) if dest is not None else None
                if new is not None:
                    return ctx.b.replace(hit[0], new)
    t = ctx.b.tensor(v.shape, dtype=dtype)
    ctx.b.emit(EwiseCall("copy", "none", (v,), V.of(t)))
    return t


def fuse_into_producer(ctx: GraphContext, name: str, patch, users: int = 1) -> View | None:
    """Applies `patch(call) -> call | None` to the exclusive, still-patchable producer of the
    value named `name` (read by `users` nodes of the fused pattern); returns the (unchanged)
    value as a view, or None if not fused."""
    hit = ctx.patchable(name, users)
    if hit is None:
        return None
    call, value = hit
    new = patch(call)
    if new is None:
        return None
    ctx.b.replace(call, new)
    return value


def fuse_act(ctx: GraphContext, name: str, act: str, users: int = 1) -> View | None:
    """The value named `name` with `act` applied by its producer, or None."""
    return fuse_into_producer(ctx, name, lambda call: call.with_act(act), users)


def ready_before(ctx: GraphContext, v, call: Call) -> bool:
    """True if every buffer value `v` reads is complete before `call`'s first launch."""
    if isinstance(v, np.ndarray):
        return True
    tensors = [v.base if isinstance(v, View) else v]
    if isinstance(v, Lazy):
        tensors = [t.base if isinstance(t, View) else t for t in v.parts()]
    start = ctx.b.position(call)
    return all(isinstance(t, Tensor) and ctx.b.last_write(t) < start for t in tensors)


def bind(ctx: GraphContext, node, final_name: str, value) -> list:
    """Outputs of a node whose result was moved to a later (absorbed) node's output name."""
    if final_name != node.output[0]:
        ctx.values[final_name] = value
    return [value]
