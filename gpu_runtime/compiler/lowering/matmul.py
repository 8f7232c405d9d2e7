"""Lowering of Gemm and MatMul onto the strided GEMM kernel (bias Add and activation fused)."""

from __future__ import annotations

import numpy as np

from gpu_runtime.compiler.graph import UnsupportedModelError
from gpu_runtime.compiler.lowering.common import bind, fuse_activation, only_attrs, prod
from gpu_runtime.kernels import gemm


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
    if prod(shape) == 1:
        return [0, 0]
    if shape[-1:] == (N,) and prod(shape) == N:
        return [0, 1]
    if len(shape) == 2 and shape == (M, 1):
        return [1, 0]
    if len(shape) == 2 and shape == (M, N):
        return [N, 1]
    raise UnsupportedModelError(f"bias of shape {shape} does not broadcast to ({M}, {N})")


def lower_gemm(ctx, node, ins, attrs):
    only_attrs(attrs, {"alpha", "beta", "transA", "transB"})
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
    return bind(ctx, node, out_name, y)


def lower_matmul(ctx, node, ins, attrs):
    only_attrs(attrs, set())
    a, b = ctx.b.as_tensor(ins[0]), ctx.b.as_tensor(ins[1])
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise UnsupportedModelError("1-D MatMul operands are not supported")
    M, K = a.shape[-2:]
    K2, N = b.shape[-2:]
    if K != K2:
        raise UnsupportedModelError(f"inner dimensions {K} and {K2} differ")
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    abatch, bbatch = prod(a.shape[:-2]), prod(b.shape[:-2])
    z = prod(batch)
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
        if bias is not None and bias.ndim <= 1 and prod(bias.shape) in (1, N):
            c, sc = ctx.b.weight(bias), _bias_strides(bias.shape, Mz, N)
            ctx.absorb(add)
            out_name = add.output[0]
    out_name, act = fuse_activation(ctx, out_name)
    y = _gemm_launch(ctx, a, b, c, batch + (M, N), Mz, N, K, zz, sa, sb, sc, 1.0, 1.0, act)
    ctx.values[out_name] = y
    return [y]
