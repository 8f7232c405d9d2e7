"""Lowering of elementwise ops. Before launching anything, each op tries to fold into the kernel
that produced its input (when that result feeds nothing else): activations and constant scales
into any epilogue, a residual Add into a GEMM's addend. A per-channel Mul (squeeze-excitation)
stays lazy for a consumer that can scale while it loads; a scalar Mul before a MatMul becomes
the product's alpha. Otherwise one elementwise launch reads the operands through their views."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpu_runtime.compiler import view as V
from gpu_runtime.compiler.graph import Lazy, Tensor, UnsupportedModelError, View
from gpu_runtime.compiler.lowering.common import (FUSIBLE_ACTS, as_view, bind, ewise, fuse_act,
                                                  fuse_into_producer, only_attrs, prod,
                                                  ready_before)


@dataclass(frozen=True, eq=False)
class Pending(Lazy):
    """x with a multiplication a consumer may still fold into its own kernel; `name` is the ONNX
    name it would have as a buffer."""

    x: object
    name: str | None

    @property
    def shape(self):
        return tuple(self.x.shape)


@dataclass(frozen=True, eq=False)
class ChannelScaled(Pending):
    """x [N, C, ...] times s [N, C, 1, ...] (a squeeze-excitation scale)."""

    s: Tensor

    def scale_view(self) -> View:
        """s as [N, C]."""
        return V.reshape(V.of(self.s), self.s.shape[:2])

    def parts(self) -> list:
        return [self.x, self.s]

    def materialize(self, ctx) -> Tensor:
        return ewise(ctx, "mul", [self.x, self.s], self.name)


@dataclass(frozen=True, eq=False)
class Scaled(Pending):
    """x times a constant, left for a MatMul to fold into alpha."""

    factor: float

    def parts(self) -> list:
        return [self.x]

    def materialize(self, ctx) -> Tensor:
        return ewise(ctx, "scale", [self.x], self.name, alpha=self.factor)


def unary(ctx, node, op: str, x, alpha: float = 0.0, beta: float = 0.0,
          act: str | None = None, name: str | None = None, users: int = 1) -> list:
    """`op` of x as node's output (or `name`): fused into x's producer when `act` names the same
    activation (x read by `users` nodes of the matched pattern), else one launch."""
    name = name or node.output[0]
    if act is not None:
        fused = fuse_act(ctx, node.input[0], act, users)
        if fused is not None:
            return bind(ctx, node, name, fused)
    return bind(ctx, node, name, ewise(ctx, op, [x], name, alpha, beta))


def unary_op(op: str, defaults: tuple[float, float] = (0.0, 0.0), names=("alpha", "beta")):
    def lower(ctx, node, ins, attrs):
        only_attrs(attrs, set(names))
        alpha = attrs.get(names[0], defaults[0])
        beta = attrs.get(names[1], defaults[1])
        act = FUSIBLE_ACTS.get(node.op_type)
        if op == "hardsigmoid" and abs(alpha - 1 / 6) < 1e-6 and abs(beta - 0.5) < 1e-6:
            act = "hardsigmoid"
        return unary(ctx, node, op, ins[0], alpha, beta, act)
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


def _scalar(v) -> float | None:
    return float(v.reshape(-1)[0]) if isinstance(v, np.ndarray) and v.size == 1 else None


def lower_sigmoid(ctx, node, ins, attrs):
    """Sigmoid(x) feeding only Mul(x, .) is Swish/SiLU: one activation instead of two ops;
    Mul(a, Sigmoid(b)) of two different tensors is a GLU, one launch."""
    only_attrs(attrs, set())
    mul = ctx.sole_consumer(node.output[0], ("Mul",))
    other = _other_input(mul, node.output[0]) if mul is not None else None
    if other == node.input[0]:
        ctx.absorb(mul)
        return unary(ctx, node, "swish", ins[0], act="swish", name=mul.output[0], users=2)
    if other is not None and isinstance(ctx.values.get(other), (Tensor, View)):
        ctx.absorb(mul)
        return bind(ctx, node, mul.output[0],
                    ewise(ctx, "mul_sigmoid", [ctx.values[other], ins[0]], mul.output[0]))
    return unary(ctx, node, "sigmoid", ins[0], act="sigmoid")


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


def lower_add(ctx, node, ins, attrs):
    """A residual Add: the operand whose producer can still take an addend absorbs the other
    (read in the producer's coordinates, and the sum written in this node's layout)."""
    only_attrs(attrs, set())
    for i in (1, 0):
        hit = ctx.patchable(node.input[i])
        other = ins[1 - i]
        if hit is None or not ready_before(ctx, other, hit[0]):
            continue
        call, value = hit
        scale = None
        if isinstance(other, ChannelScaled):
            other, scale = other.x, other.scale_view()
        if tuple(np.broadcast_shapes(value.shape, other.shape)) != tuple(value.shape):
            continue
        addend = V.invert(value, V.broadcast_to(as_view(ctx, other), value.shape))
        new = call.with_addend(addend, scale) if addend is not None else None
        if new is None:
            continue
        # the producer's own layout (or a reshape of it) stays; another one is written directly
        in_place = value.contiguous_offset() == 0 and prod(value.shape) == prod(value.base.shape)
        if not in_place:
            y = ctx.b.tensor(value.shape, dtype=ctx.out_dtype(node.output[0]))
            dest = V.invert(value, V.of(y))
            new = new.with_destination(dest) if dest is not None else None
            if new is None:
                continue
        ctx.b.replace(call, new)
        return [value if in_place else new.output]
    return [ewise(ctx, "add", list(ins), node.output[0])]


def _channel_scale(ctx, x, s) -> bool:
    """True if s is a runtime [N, C, 1, ...] scale of x [N, C, ...] (squeeze-excitation)."""
    if not isinstance(s, Tensor) or isinstance(x, np.ndarray) or len(x.shape) < 3:
        return False
    shape = tuple(x.shape)
    return (tuple(s.shape) == shape[:2] + (1,) * (len(shape) - 2)) and prod(shape[2:]) > 1


def _gelu(ctx, node, ins) -> list | None:
    """Mul and Div both open torch's erf-form GELU: the whole chain as one activation."""
    gelu = match_erf_gelu(ctx, node) if isinstance(ins[0], (Tensor, View)) else None
    if gelu is None:
        return None
    return unary(ctx, node, "gelu", ins[0], act="gelu", name=gelu, users=2)


def lower_mul(ctx, node, ins, attrs):
    only_attrs(attrs, set())
    gelu = _gelu(ctx, node, ins)
    if gelu is not None:
        return gelu
    for i in (0, 1):
        x, c = ins[i], ins[1 - i]
        factor = _scalar(c)
        if factor is not None and not isinstance(x, np.ndarray):
            return _scale(ctx, node, node.input[i], x, factor)
        if _channel_scale(ctx, x, c):
            return [ChannelScaled(x, node.output[0], c)]
    return [ewise(ctx, "mul", list(ins), node.output[0])]


def lower_div(ctx, node, ins, attrs):
    only_attrs(attrs, set())
    gelu = _gelu(ctx, node, ins)
    if gelu is not None:
        return gelu
    factor = _scalar(ins[1])
    if factor is not None and factor != 0 and not isinstance(ins[0], np.ndarray):
        return _scale(ctx, node, node.input[0], ins[0], 1.0 / factor)
    return [ewise(ctx, "div", list(ins), node.output[0])]


def _scale(ctx, node, name: str, x, factor: float) -> list:
    """x * factor: into x's producer, into the MatMul consuming it, or one launch."""
    fused = fuse_into_producer(ctx, name, lambda call: call.with_scale(factor))
    if fused is not None:
        return [fused]
    if ctx.sole_consumer(node.output[0], ("MatMul",)) is not None:
        return [Scaled(x, node.output[0], factor)]
    return [ewise(ctx, "scale", [x], node.output[0], alpha=factor)]


def binary_op(op: str):
    def lower(ctx, node, ins, attrs):
        only_attrs(attrs, set())
        return [ewise(ctx, op, list(ins), node.output[0])]
    return lower


def lower_gelu(ctx, node, ins, attrs):
    only_attrs(attrs, {"approximate"})
    if attrs.get("approximate", b"none") not in (b"none", "none"):
        raise UnsupportedModelError("attribute 'approximate'='tanh' is not supported")
    return unary(ctx, node, "gelu", ins[0], act="gelu")


def lower_clip(ctx, node, ins, attrs):
    only_attrs(attrs, set())
    lo = ins[1] if len(ins) > 1 and ins[1] is not None else np.float32(-3.402823e38)
    hi = ins[2] if len(ins) > 2 and ins[2] is not None else np.float32(3.402823e38)
    if not isinstance(lo, np.ndarray) or not isinstance(hi, np.ndarray):
        raise UnsupportedModelError("runtime min/max inputs are not supported")
    return [ewise(ctx, "clip", [ins[0]], node.output[0], float(lo), float(hi))]


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
    y = ewise(ctx, "mul", [x, scale.reshape(bshape)])
    return [ewise(ctx, "add", [y, shift.reshape(bshape)], node.output[0])]


def bn_affine(gamma, beta, mean, var, eps):
    scale = (gamma / np.sqrt(var.astype(np.float64) + eps)).astype(np.float32)
    return scale, (beta - mean * scale).astype(np.float32)
