"""Lowering of Conv (1-D and 2-D, grouped): BatchNormalization folded into the weights; depthwise
convolutions (and pooling, in reduce.py) as window kernels, every other convolution as an
implicit GEMM with output channels as rows (coalesced NCHW stores). Activations, scales and
residual adds reach the epilogue later, by patching the call."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from gpu_runtime.compiler import view as V
from gpu_runtime.compiler.graph import (Call, ProgramBuilder, Tensor, UnsupportedModelError, View,
                                        attrs_of, make_launch)
from gpu_runtime.compiler.lowering.common import only_attrs, prod
from gpu_runtime.compiler.lowering.elementwise import ChannelScaled, bn_affine
from gpu_runtime.compiler.lowering.gemm import ConvInput, GemmCall, conv_weights
from gpu_runtime.compiler.lowering.matmul import matmul_call
from gpu_runtime.kernels import conv as window_k


def conv_geometry(attrs, in_spatial, kernel, name="kernel_shape"):
    nd = len(in_spatial)
    strides = list(attrs.get("strides", [1] * nd))
    dil = list(attrs.get("dilations", [1] * nd))
    pads = list(attrs.get("pads", [0] * (2 * nd)))
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * nd)
        for i in range(nd):
            out = -(-in_spatial[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - in_spatial[i])
            small, big = total // 2, total - total // 2
            pads[i], pads[i + nd] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        pads = [0] * (2 * nd)
    elif auto != "NOTSET":
        raise UnsupportedModelError(f"attribute 'auto_pad'={auto!r} is not supported")
    return strides, dil, pads


def to_2d(values, fill):
    """1-D geometry as 2-D with a unit leading axis."""
    return [fill] + list(values) if len(values) == 1 else list(values)


@dataclass(frozen=True)
class WindowCall(Call):
    """A depthwise convolution or a pooling over contiguous planes (see kernels.conv)."""

    mode: str
    win: window_k.Window
    x: Tensor
    dest: View
    channels: int
    in_hw: tuple[int, int]
    out_hw: tuple[int, int]
    w: np.ndarray | None = None
    bias: np.ndarray | None = None
    act: str = "none"
    include_pad: int = 0
    partials: Tensor | None = None  # per-tile sums for a squeeze-excitation

    @property
    def tiles(self) -> tuple[int, int]:
        (oh, ow), win = self.out_hw, self.win
        return -(-oh // win.th), -(-ow // win.tw)

    def launches(self, b: ProgramBuilder):
        H, W = self.in_hw
        OH, OW = self.out_hw
        th, tw = self.tiles
        planes = math.prod(self.x.shape[:2])
        kernel = window_k.window(self.mode, self.win, self.act, self.partials is not None,
                                 (self.x.dtype, self.dest.dtype))
        w = b.weight(self.w, self.x.dtype) if self.w is not None else b.dummy(self.x.dtype)
        bias = b.weight(self.bias, self.x.dtype) if self.bias is not None else b.dummy(self.x.dtype)
        psum = self.partials if self.partials is not None else b.dummy("float32")
        writes = [self.dest.base] + ([self.partials] if self.partials is not None else [])
        return [make_launch(kernel, (planes * th * tw, 1, 1), (window_k.block_threads(self.win), 1, 1),
                            [self.x, w, bias, self.dest.base, psum, self.channels, H, W, OH, OW,
                             th, tw, self.include_pad], writes)]

    def with_act(self, act):
        return dataclasses.replace(self, act=act) if self.act == "none" and self.mode == "conv" else None

    def with_partials(self, b: ProgramBuilder) -> "WindowCall":
        th, tw = self.tiles
        sums = b.tensor(self.x.shape[:2] + (th * tw,), dtype="float32")
        return dataclasses.replace(self, partials=sums)


def window_call(ctx, mode: str, x: Tensor, out_name: str, kernel, strides, dil, pads_begin,
                out_spatial, w=None, bias=None, include_pad=0) -> Tensor:
    """Emits a window kernel over x [N, C, *spatial] (1-D as H = 1)."""
    n, c = x.shape[:2]
    H, W = to_2d(x.shape[2:], 1)
    OH, OW = to_2d(out_spatial, 1)
    KH, KW = to_2d(kernel, 1)
    sh, sw = to_2d(strides, 1)
    dh, dw = to_2d(dil, 1)
    ph, pw = to_2d(pads_begin, 0)
    th, tw = window_k.tile_for(OH, OW, KH, KW, sh, sw, dh, dw, n * c)
    win = window_k.Window(KH, KW, sh, sw, ph, pw, dh, dw, th, tw)
    y = ctx.b.tensor((n, c, *out_spatial), dtype=ctx.out_dtype(out_name))
    return ctx.b.emit(WindowCall(mode, win, x, V.of(y), c, (H, W), (OH, OW), w, bias,
                                 include_pad=include_pad))


def lower_conv(ctx, node, ins, attrs):
    only_attrs(attrs, {"kernel_shape", "strides", "pads", "dilations", "group", "auto_pad"})
    x, w = ins[0], ins[1]
    if not isinstance(w, np.ndarray):
        raise UnsupportedModelError("runtime (non-initializer) weights are not supported")
    nd = len(x.shape) - 2
    if nd not in (1, 2):
        raise UnsupportedModelError(f"{nd}-D convolution is not supported (1-D and 2-D are)")
    groups = attrs.get("group", 1)
    cout, cg = w.shape[:2]
    kernel = list(w.shape[2:])
    if x.shape[1] != cg * groups:
        raise UnsupportedModelError(f"input channels {x.shape[1]} != {cg} x group {groups}")
    strides, dil, pads = conv_geometry(attrs, x.shape[2:], kernel)
    bias = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros(cout, np.float32)
    if not isinstance(bias, np.ndarray):
        raise UnsupportedModelError("runtime bias is not supported")
    w = w.astype(np.float32)
    bias = bias.astype(np.float32)
    out_name = node.output[0]
    bn = ctx.sole_consumer(out_name, ("BatchNormalization",))
    if bn is not None and all(ctx.const(n) is not None for n in bn.input[1:5]) \
            and not attrs_of(bn).get("training_mode", 0):
        scale_bn, shift = bn_affine(*(ctx.const(n) for n in bn.input[1:5]),
                                    attrs_of(bn).get("epsilon", 1e-5))
        w = w * scale_bn.reshape((-1,) + (1,) * (w.ndim - 1))
        bias = bias * scale_bn + shift
        ctx.absorb(bn)
        out_name = bn.output[0]
    og = cout // groups
    depthwise = cg == 1 and og == 1
    scale = None
    if isinstance(x, ChannelScaled) and groups == 1:  # the GEMM scales B while loading it
        x, scale = x.x, x.scale_view()
    pointwise = all(k == 1 for k in kernel) and all(s == 1 for s in strides) and not any(pads)
    if pointwise and groups == 1 and scale is None and isinstance(x, View) and not x.plain:
        # a 1x1 convolution of a strided view (Conformer's transposed activations) is a batched
        # product reading the view in place: Y[n] = W @ X[n]
        n, p = x.shape[0], prod(x.shape[2:])
        xv = V.reshape(x, (n, x.shape[1], p)) or V.reshape(V.of(ctx.tensor(x, node.input[0])),
                                                           (n, x.shape[1], p))
        y = matmul_call(ctx, V.of(ctx.b.weight(w.reshape(cout, cg))), xv, out_name,
                        bias=bias, names=(None, node.input[0]), bias_rows=True)
        y = V.reshape(V.of(y), (n, cout, *x.shape[2:]))
        ctx.values[out_name] = y
        return [y]
    x = ctx.tensor(x, node.input[0])
    spatial = x.shape[2:]
    out_spatial = [(spatial[i] + pads[i] + pads[i + nd] - dil[i] * (kernel[i] - 1) - 1)
                   // strides[i] + 1 for i in range(nd)]
    if depthwise:
        y = window_call(ctx, "conv", x, out_name, kernel, strides, dil, pads[:nd], out_spatial,
                        w.reshape(cout, -1), bias)
        ctx.values[out_name] = y
        return [y]
    n = x.shape[0]
    H, W = to_2d(spatial, 1)
    OH, OW = to_2d(out_spatial, 1)
    KH, KW = to_2d(kernel, 1)
    geom = window_k.Geometry(KH, KW, *to_2d(strides, 1), *to_2d(pads[:nd], 0), *to_2d(dil, 1))
    rows, k = conv_weights(w, groups)
    a = V.reshape(V.of(ctx.b.weight(rows)), (1, groups, 1, og, rows.shape[-1]))
    y = ctx.b.tensor((n, cout, *out_spatial), dtype=ctx.out_dtype(out_name))
    call = GemmCall(a, ConvInput(x, geom, H, W, OH, OW, groups, scale), V.of(y), (1, groups, 1),
                    og, n * OH * OW, k, ctx.b.dtype == "float16", bias_array=bias,
                    padded_a=True)
    ctx.b.emit(call)
    ctx.values[out_name] = y
    return [y]
