"""Lowering of Gemm and MatMul onto the GEMM call: operands stay views (transposes, head splits
and batch broadcasts are strides; a gathered-rows A is an int32 table), a constant bias Add is
the epilogue's bias, a constant addend (Swin's relative position bias) its addend, and a scalar
Mul/Div before or after the product its alpha."""

from __future__ import annotations

import dataclasses

import numpy as np

from gpu_runtime.compiler import view as V
from gpu_runtime.compiler.graph import UnsupportedModelError, View
from gpu_runtime.compiler.lowering.common import as_view, only_attrs, prod
from gpu_runtime.compiler.lowering.elementwise import Scaled
from gpu_runtime.compiler.lowering.gemm import GemmCall

MAX_BATCH_DIMS = 3


def _unscaled(ctx, v):
    """(view, factor) of an operand that may carry a pending scalar factor."""
    if isinstance(v, Scaled):
        return as_view(ctx, v.x), v.factor
    return as_view(ctx, v), 1.0


def _framed(ctx, v: View, shape, name: str | None) -> View:
    """v reshaped to `shape` as an affine view (v, the value named `name`, is produced in
    place or copied first if its layout cannot be)."""
    w = V.reshape(v, shape)
    if w is None or not w.affine:
        w = V.reshape(V.of(ctx.tensor(v, name)), shape)
    return w


def _zshape(batch: tuple[int, ...]) -> tuple[int, int, int]:
    if len(batch) > MAX_BATCH_DIMS:
        batch = (prod(batch[:len(batch) - MAX_BATCH_DIMS + 1]),) + batch[len(batch) - MAX_BATCH_DIMS + 1:]
    return tuple([1] * (MAX_BATCH_DIMS - len(batch)) + list(batch))


def matmul_call(ctx, a: View, b: View, out_name: str, alpha: float = 1.0, bias=None,
                addend: View | None = None, beta: float = 1.0, names=(None, None),
                bias_rows: bool = False):
    """Emits Y = alpha * A @ B (+ bias per column, or per row) (+ beta * addend) for
    a [..., M, K] and b [..., K, N] (NumPy batch broadcasting; `names` are the operands' ONNX
    names, so a producer can write them in the layout needed); returns the output tensor."""
    M, K = a.shape[-2:]
    K2, N = b.shape[-2:]
    if K != K2:
        raise UnsupportedModelError(f"inner dimensions {K} and {K2} differ")
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    lshape = batch + (M, N)
    folded = V.reshape(a, (prod(a.shape[:-2]) * M, K)) if prod(b.shape[:-2]) == 1 else None
    gathered = (folded is not None and folded.k == 1 and folded.strides[0] == 1 and K % 4 == 0
                and not np.any(folded.table % 4))
    if folded is not None and (folded.affine or gathered):
        # a batch over the rows of A only: one GEMM over all of them (a table gathers them)
        zshape, m = (1, 1, 1), prod(batch) * M
        a5 = V.reshape(folded, zshape + (m, K))
        b5 = _framed(ctx, b, zshape + (K, N), names[1])
    else:
        zshape, m = _zshape(batch), M
        a5 = _framed(ctx, V.broadcast_to(a, batch + (M, K)), zshape + (M, K), names[0])
        b5 = _framed(ctx, V.broadcast_to(b, batch + (K, N)), zshape + (K, N), names[1])
    y = ctx.b.tensor(lshape, dtype=ctx.out_dtype(out_name))
    bias_array = None
    if bias is not None:
        count = M if bias_rows else N
        bias_array = np.broadcast_to(np.asarray(bias, np.float32).reshape(-1), (count,)).copy()
    if addend is not None:
        addend = V.broadcast_to(addend, lshape)
    call = GemmCall(a5, b5, V.of(y), zshape, m, N, K, ctx.b.dtype == "float16",
                    bias_array=bias_array, bias_rows=bias_rows, addend=addend, alpha=alpha,
                    beta=beta)
    if addend is not None and call.frame(addend) is None:
        call = dataclasses.replace(call, addend=V.of(ctx.tensor(addend)))
    return ctx.b.emit(call)


def _trailing_add(ctx, name: str, N: int):
    """A following Add of a constant: (bias per column, or an addend array, Add node), or None."""
    add = ctx.sole_consumer(name, ("Add",))
    if add is None:
        return None
    other = add.input[1] if add.input[0] == name else add.input[0]
    c = ctx.const(other)
    if c is None:
        return None
    if c.ndim <= 1 and c.size in (1, N):
        return np.broadcast_to(c.astype(np.float32).reshape(-1), (N,)), None, add
    return None, c, add


def lower_gemm(ctx, node, ins, attrs):
    only_attrs(attrs, {"alpha", "beta", "transA", "transB"})
    (a, fa), (b, fb) = _unscaled(ctx, ins[0]), _unscaled(ctx, ins[1])
    if attrs.get("transA", 0):
        a = V.transpose(a, (1, 0))
    if attrs.get("transB", 0):
        b = V.transpose(b, (1, 0))
    N = b.shape[1]
    c = ins[2] if len(ins) > 2 and ins[2] is not None else None
    bias, addend = None, None
    beta = float(attrs.get("beta", 1.0))
    if isinstance(c, np.ndarray) and c.ndim <= 1 and c.size in (1, N):
        bias = beta * c.astype(np.float32)
    elif c is not None:
        addend = as_view(ctx, c)
    alpha = float(attrs.get("alpha", 1.0)) * fa * fb
    return [matmul_call(ctx, a, b, node.output[0], alpha, bias, addend, beta, node.input[:2])]


def lower_matmul(ctx, node, ins, attrs):
    only_attrs(attrs, set())
    (a, fa), (b, fb) = _unscaled(ctx, ins[0]), _unscaled(ctx, ins[1])
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise UnsupportedModelError("1-D MatMul operands are not supported")
    out_name, bias, addend = node.output[0], None, None
    trailing = _trailing_add(ctx, out_name, b.shape[-1])
    if trailing is not None:
        bias, const, add = trailing
        if const is not None:
            shape = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])) + (a.shape[-2], b.shape[-1])
            if tuple(np.broadcast_shapes(shape, const.shape)) != shape:
                const = None
            addend = as_view(ctx, const) if const is not None else None
        if bias is not None or addend is not None:
            ctx.absorb(add)
            out_name = add.output[0]
    y = matmul_call(ctx, a, b, out_name, fa * fb, bias, addend, names=node.input[:2])
    ctx.values[out_name] = y
    return [y]
