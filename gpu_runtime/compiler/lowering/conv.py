"""Lowering of Conv (1-D and 2-D, grouped): BatchNormalization folded into the weights, the
activation into the epilogue; wide groups as implicit GEMM, thin (depthwise) ones direct."""

from __future__ import annotations

import numpy as np

from gpu_runtime.compiler.graph import Tensor, UnsupportedModelError, attrs_of
from gpu_runtime.compiler.lowering.common import BLOCK, fuse_activation, only_attrs
from gpu_runtime.compiler.lowering.elementwise import bn_affine
from gpu_runtime.kernels import conv as conv_k
from gpu_runtime.kernels import gemm
from gpu_runtime.kernels.source import grid_1d


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


def lower_conv(ctx, node, ins, attrs):
    only_attrs(attrs, {"kernel_shape", "strides", "pads", "dilations", "group", "auto_pad"})
    x = ctx.b.as_tensor(ins[0])
    w = ins[1]
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
    if isinstance(bias, Tensor):
        raise UnsupportedModelError("runtime bias is not supported")
    w = w.astype(np.float32)
    bias = bias.astype(np.float32)
    out_name = node.output[0]
    bn = ctx.sole_consumer(out_name, ("BatchNormalization",))
    if bn is not None and all(ctx.const(n) is not None for n in bn.input[1:5]) \
            and not attrs_of(bn).get("training_mode", 0):
        scale, shift = bn_affine(*(ctx.const(n) for n in bn.input[1:5]),
                                  attrs_of(bn).get("epsilon", 1e-5))
        w = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
        bias = bias * scale + shift
        ctx.absorb(bn)
        out_name = bn.output[0]
    out_name, act = fuse_activation(ctx, out_name)

    n, c = x.shape[:2]
    H, W = to_2d(x.shape[2:], 1)
    KH, KW = to_2d(kernel, 1)
    sh, sw = to_2d(strides, 1)
    dh, dw = to_2d(dil, 1)
    pb = to_2d(pads[:nd], 0)
    pe = to_2d(pads[nd:], 0)
    OH = (H + pb[0] + pe[0] - dh * (KH - 1) - 1) // sh + 1
    OW = (W + pb[1] + pe[1] - dw * (KW - 1) - 1) // sw + 1
    out_shape = (n, cout, OW) if nd == 1 else (n, cout, OH, OW)
    y = ctx.b.tensor(out_shape)
    wt, bt = ctx.b.weight(w), ctx.b.weight(bias)
    og = cout // groups
    geometry = [KH, KW, sh, sw, pb[0], pb[1], dh, dw]
    if og >= 16:
        m, k = n * OH * OW, cg * KH * KW
        ctx.b.launch(gemm.conv_implicit(act), gemm.gemm_grid(m, og, groups), (gemm.THREADS, 1, 1),
                     [x, wt, bt, y, m, og, k, c, cg, H, W, cout, OH, OW, *geometry], [y])
    else:
        total = n * cout * OH * OW
        ctx.b.launch(conv_k.conv_direct(act), grid_1d(total), BLOCK,
                     [x, wt, bt, y, n, c, H, W, cout, OH, OW, *geometry, groups], [y])
    ctx.values[out_name] = y
    return [y]
