"""Direct convolution for thin groups (depthwise): one thread per output element. Wide groups go
through the implicit-GEMM kernel in gemm.py, where a 64-wide channel tile is worth its staging."""

from __future__ import annotations

import functools

from gpu_runtime.kernels.gemm import conv_numpy
from gpu_runtime.kernels.source import ACT_CUDA, kernel_source
from gpu_runtime.compiler.program import KernelDef


@functools.cache
def conv_direct(act: str = "none") -> KernelDef:
    name = f"atoll_conv_direct_{act}"
    body = r"""
  const long long total = (long long)Nimg * Cout * OH * OW;
  const int cg = C / groups, og = Cout / groups;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    int ow = i % OW; long long r = i / OW;
    int oh = r % OH; r /= OH;
    int co = r % Cout; int img = r / Cout;
    int g = co / og;
    const float* xb = X + ((long long)img * C + (long long)g * cg) * H * W;
    const float* wb = Wt + (long long)co * cg * KH * KW;
    float v = bias[co];
    for (int ci = 0; ci < cg; ++ci)
      for (int kh = 0; kh < KH; ++kh) {
        int ih = oh * sh - ph + kh * dh;
        if (ih < 0 || ih >= H) continue;
        for (int kw = 0; kw < KW; ++kw) {
          int iw = ow * sw - pw + kw * dw;
          if (iw < 0 || iw >= W) continue;
          v += xb[((long long)ci * H + ih) * W + iw] * wb[(ci * KH + kh) * KW + kw];
        }
      }
    Y[i] = ACT_EXPR;
  }""".replace("ACT_EXPR", ACT_CUDA[act])
    params = ("const float* __restrict__ X, const float* __restrict__ Wt, "
              "const float* __restrict__ bias, float* __restrict__ Y, int Nimg, int C, int H, "
              "int W, int Cout, int OH, int OW, int KH, int KW, int sh, int sw, int ph, int pw, "
              "int dh, int dw, int groups")
    src = kernel_source(name, params, body)

    def impl(x, w, bias, y, Nimg, C, H, W, Cout, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, groups):
        conv_numpy(x, w, bias, y, C, H, W, Cout, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, groups,
                   act)

    return KernelDef(name, src, impl, registers=40)
