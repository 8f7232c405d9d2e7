"""What every lowering shares: shape arithmetic, attribute checks, and the launch helpers for
the strided copy and the unary/binary elementwise kernels, plus activation fusion."""

from __future__ import annotations

import numpy as np

from gpu_runtime.compiler.graph import GraphContext, Tensor, UnsupportedModelError
from gpu_runtime.kernels import elementwise, layout
from gpu_runtime.kernels.source import MAXD, THREADS, grid_1d, pad_shape

BLOCK = (THREADS, 1, 1)
FUSIBLE_ACTS = {"Relu": "relu", "HardSwish": "hardswish"}


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


def copy(ctx: GraphContext, x: Tensor, y: Tensor, dims, xo, xs, yo, ys) -> None:
    n = prod(dims)
    if n == 0:
        return
    d, xs6 = pad_shape(dims, xs)
    _, ys6 = pad_shape(dims, ys)
    ctx.b.launch(layout.copy(), grid_1d(n), BLOCK, [x, y, n, int(xo), int(yo), *d, *xs6, *ys6], [y])


def unary(ctx: GraphContext, op: str, x: Tensor, alpha: float = 0.0, beta: float = 0.0) -> Tensor:
    y = ctx.b.tensor(x.shape)
    n = prod(x.shape)
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
    n = prod(shape)
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


def bind(ctx: GraphContext, node, final_name: str, value) -> list:
    """Outputs of a node whose result was moved to a later (absorbed) node's output name."""
    if final_name != node.output[0]:
        ctx.values[final_name] = value
    return [value]
