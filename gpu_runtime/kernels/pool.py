"""2-D max/average pooling (1-D as H = 1): one thread per output element."""

from __future__ import annotations

import functools

import numpy as np

from gpu_runtime.kernels.source import kernel_source
from gpu_runtime.compiler.program import KernelDef


@functools.cache
def pool(mode: str) -> KernelDef:
    assert mode in ("max", "avg")
    name = f"atoll_pool_{mode}"
    init, update = ("-3.402823466e38f", "v = fmaxf(v, x);") if mode == "max" else ("0.f", "v += x;")
    finish = "v" if mode == "max" else "v / (count_include_pad ? KH * KW : cnt)"
    body = f"""
  const long long total = (long long)NC * OH * OW;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {{
    int ow = i % OW; long long r = i / OW; int oh = r % OH; long long nc = r / OH;
    const float* xb = X + nc * H * W;
    float v = {init}; int cnt = 0;
    for (int kh = 0; kh < KH; ++kh) {{
      int ih = oh * sh - ph + kh * dh;
      if (ih < 0 || ih >= H) continue;
      for (int kw = 0; kw < KW; ++kw) {{
        int iw = ow * sw - pw + kw * dw;
        if (iw < 0 || iw >= W) continue;
        float x = xb[ih * W + iw]; {update} ++cnt;
      }}
    }}
    Y[i] = {finish};
  }}"""
    params = ("const float* __restrict__ X, float* __restrict__ Y, int NC, int H, int W, int OH, "
              "int OW, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, "
              "int count_include_pad")
    src = kernel_source(name, params, body)

    def impl(x, y, NC, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, count_include_pad):
        hp = max(H + ph, (OH - 1) * sh + (KH - 1) * dh + 1)
        wp = max(W + pw, (OW - 1) * sw + (KW - 1) * dw + 1)
        fill = -np.inf if mode == "max" else 0.0
        xp = np.full((NC, hp, wp), fill, np.float32)
        xp[:, ph:ph + H, pw:pw + W] = x.reshape(NC, H, W)
        s = xp.strides
        win = np.lib.stride_tricks.as_strided(
            xp, (NC, OH, OW, KH, KW), (s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw))
        out = y.reshape(NC, OH, OW)
        if mode == "max":
            np.max(win, axis=(3, 4), out=out)
            return
        np.sum(win, axis=(3, 4), out=out)
        if count_include_pad:
            out /= np.float32(KH * KW)
        else:
            ones = np.zeros((hp, wp), np.float32)
            ones[ph:ph + H, pw:pw + W] = 1
            t = ones.strides
            cnt = np.lib.stride_tricks.as_strided(
                ones, (OH, OW, KH, KW), (t[0] * sh, t[1] * sw, t[0] * dh, t[1] * dw)).sum((2, 3))
            out /= cnt

    return KernelDef(name, src, impl, registers=32)
