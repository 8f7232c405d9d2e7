"""Lowering of elementwise ops: unary maps, broadcasting binary ops, fused SiLU/GELU patterns,
Clip and unfused BatchNormalization."""

from __future__ import annotations

import numpy as np

from gpu_runtime.compiler.graph import Tensor, UnsupportedModelError
from gpu_runtime.compiler.lowering.common import bind, binary, only_attrs, unary


def unary_op(op: str, defaults: tuple[float, float] = (0.0, 0.0), names=("alpha", "beta")):
    def lower(ctx, node, ins, attrs):
        only_attrs(attrs, set(names))
        alpha = attrs.get(names[0], defaults[0])
        beta = attrs.get(names[1], defaults[1])
        return [unary(ctx, op, ctx.b.as_tensor(ins[0]), alpha, beta)]
    return lower


def binary_op(op: str):
    def lower(ctx, node, ins, attrs):
        only_attrs(attrs, set())
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
    only_attrs(attrs, set())
    x = ctx.b.as_tensor(ins[0])
    mul = ctx.sole_consumer(node.output[0], ("Mul",))
    if mul is not None and _other_input(mul, node.output[0]) == node.input[0]:
        ctx.absorb(mul)
        return bind(ctx, node, mul.output[0], unary(ctx, "swish", x))
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


def scaling_op(op: str):
    """Div and Mul also open torch's erf-form GELU."""
    plain = binary_op(op)

    def lower(ctx, node, ins, attrs):
        out = match_erf_gelu(ctx, node) if isinstance(ins[0], Tensor) else None
        if out is None:
            return plain(ctx, node, ins, attrs)
        return bind(ctx, node, out, unary(ctx, "gelu", ins[0]))
    return lower


def lower_gelu(ctx, node, ins, attrs):
    only_attrs(attrs, {"approximate"})
    if attrs.get("approximate", b"none") not in (b"none", "none"):
        raise UnsupportedModelError("attribute 'approximate'='tanh' is not supported")
    return [unary(ctx, "gelu", ins[0])]


def lower_clip(ctx, node, ins, attrs):
    only_attrs(attrs, set())
    lo = ins[1] if len(ins) > 1 and ins[1] is not None else np.float32(-3.402823e38)
    hi = ins[2] if len(ins) > 2 and ins[2] is not None else np.float32(3.402823e38)
    if isinstance(lo, Tensor) or isinstance(hi, Tensor):
        raise UnsupportedModelError("runtime min/max inputs are not supported")
    return [unary(ctx, "clip", ins[0], float(lo), float(hi))]


def lower_batchnorm(ctx, node, ins, attrs):
    """A BatchNormalization not folded into a Conv: y = x * scale + shift per channel."""
    only_attrs(attrs, {"epsilon", "momentum", "training_mode"})
    if attrs.get("training_mode", 0):
        raise UnsupportedModelError("attribute 'training_mode'=1 is not supported")
    x, params = ins[0], ins[1:5]
    if any(not isinstance(p, np.ndarray) for p in params):
        raise UnsupportedModelError("runtime scale/bias/mean/var are not supported")
    scale, shift = bn_affine(*params, attrs.get("epsilon", 1e-5))
    bshape = (-1,) + (1,) * (len(x.shape) - 2)
    y = binary(ctx, "mul", x, scale.reshape(bshape))
    return [binary(ctx, "add", y, shift.reshape(bshape))]


def bn_affine(gamma, beta, mean, var, eps):
    scale = (gamma / np.sqrt(var.astype(np.float64) + eps)).astype(np.float32)
    return scale, (beta - mean * scale).astype(np.float32)
