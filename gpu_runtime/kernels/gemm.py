"""Tiled fp32 GEMM: one template, two operand loaders (strided matmul, implicit-im2col conv).

A block computes a 64x64 tile of C from 16-deep slices of A and B staged in shared memory; each of
its 256 threads owns a 4x4 patch. The guard is re-checked per K slice; outputs are written only in
the epilogue, so a block that stops early has written nothing.
"""

from __future__ import annotations

import functools

import numpy as np

from gpu_runtime.kernels.source import ACT_CUDA, act_numpy, kernel_source, strided
from gpu_runtime.compiler.program import KernelDef

BM, BN, BK = 64, 64, 16
THREADS = 256
SHARED_BYTES = 4 * BK * (BM + 4 + BN + 4) + 4

# {setup} computes per-block bases; LOAD_A(m, k), LOAD_B(k, n) and {store} are family-specific.
TEMPLATE = r"""
  __shared__ float As[16][68];
  __shared__ float Bs[16][68];
  __shared__ int stop;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64, z = blockIdx.z;
{setup}
  float acc[4][4];
  for (int i = 0; i < 4; ++i) for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
  for (int k0 = 0; k0 < K; k0 += 16) {{
    for (int e = tid; e < 1024; e += 256) {{
      int mm = e % 64, kk = e / 64, m = m0 + mm, k = k0 + kk;
      As[kk][mm] = (m < M && k < K) ? LOAD_A(m, k) : 0.f;
      int nn = e % 64, kb = e / 64, n = n0 + nn, kq = k0 + kb;
      Bs[kb][nn] = (n < N && kq < K) ? LOAD_B(kq, n) : 0.f;
    }}
    ATOLL_TILE_GUARD(atoll_preempt, stop);
    for (int kk = 0; kk < 16; ++kk) {{
      float a[4], b[4];
      for (int i = 0; i < 4; ++i) a[i] = As[kk][ty * 4 + i];
      for (int j = 0; j < 4; ++j) b[j] = Bs[kk][tx * 4 + j];
      for (int i = 0; i < 4; ++i) for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }}
    __syncthreads();
  }}
  for (int i = 0; i < 4; ++i) for (int j = 0; j < 4; ++j) {{
    int m = m0 + ty * 4 + i, n = n0 + tx * 4 + j;
    if (m < M && n < N) {{
      float v = acc[i][j];
{store}
    }}
  }}
"""


def gemm_grid(m: int, n: int, z: int) -> tuple[int, int, int]:
    return ((n + BN - 1) // BN, (m + BM - 1) // BM, z)


@functools.cache
def matmul(act: str = "none", has_c: bool = False) -> KernelDef:
    """Y[z] = act(alpha * A[z] @ B[z] + beta * C) with element strides for every operand, so
    transposes and batch broadcasting (stride 0) cost nothing. Y is contiguous [Z, M, N]."""
    name = f"atoll_gemm_{act}" + ("_c" if has_c else "")
    setup = (
        "  const float* Az = A + (long long)z * sAz;\n"
        "  const float* Bz = B + (long long)z * sBz;\n"
        "#define LOAD_A(m, k) Az[(long long)(m) * sAm + (long long)(k) * sAk]\n"
        "#define LOAD_B(k, n) Bz[(long long)(k) * sBk + (long long)(n) * sBn]"
    )
    c_term = " + beta * Cm[(long long)m * sCm + (long long)n * sCn]" if has_c else ""
    store = (
        f"      v = alpha * v{c_term};\n"
        f"      Y[(long long)z * M * N + (long long)m * N + n] = {ACT_CUDA[act]};"
    )
    params = ("const float* __restrict__ A, const float* __restrict__ B, "
              "const float* __restrict__ Cm, float* __restrict__ Y, int M, int N, int K, "
              "int sAz, int sAm, int sAk, int sBz, int sBk, int sBn, int sCm, int sCn, "
              "float alpha, float beta")
    src = kernel_source(name, params, TEMPLATE.format(setup=setup, store=store))

    def impl(a, b, c, y, M, N, K, sAz, sAm, sAk, sBz, sBk, sBn, sCm, sCn, alpha, beta):
        Z = y.size // (M * N)
        av = strided(a.reshape(-1), 0, (Z, M, K), (sAz, sAm, sAk))
        bv = strided(b.reshape(-1), 0, (Z, K, N), (sBz, sBk, sBn))
        out = y.reshape(Z, M, N)
        np.matmul(av, bv, out=out)
        if alpha != 1.0:
            out *= np.float32(alpha)
        if has_c:
            out += np.float32(beta) * strided(c.reshape(-1), 0, (M, N), (sCm, sCn))
        act_numpy(act, out)

    return KernelDef(name, src, impl, registers=64, shared_bytes=SHARED_BYTES)


@functools.cache
def conv_implicit(act: str = "none") -> KernelDef:
    """Convolution as GEMM over an implicit im2col (never materialised): rows are output pixels
    (n, oh, ow), columns output channels of group z, K runs over (ci, kh, kw) of that group."""
    name = f"atoll_conv_igemm_{act}"
    setup = (
        "  const int P = OH * OW, KK = KH * KW;\n"
        "  const float* Xg = X + (long long)z * Cg * H * W;\n"
        "  const float* Wg = Wt + (long long)z * N * K;\n"
        "#define LOAD_A(m, k) conv_a(Xg, (m), (k), P, OW, KK, KW, C, H, W, sh, sw, ph, pw, dh, dw)\n"
        "#define LOAD_B(k, n) Wg[(long long)(n) * K + (k)]"
    )
    store = (
        "      int img = m / P, p = m % P, c = z * N + n;\n"
        "      v += bias[c];\n"
        f"      Y[((long long)img * Cout + c) * P + p] = {ACT_CUDA[act]};"
    )
    prelude = r"""
__device__ __forceinline__ float conv_a(const float* Xg, int m, int k, int P, int OW, int KK,
    int KW, int C, int H, int W, int sh, int sw, int ph, int pw, int dh, int dw) {
  int img = m / P, p = m % P, oh = p / OW, ow = p % OW;
  int ci = k / KK, r = k % KK, kh = r / KW, kw = r % KW;
  int ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
  if (ih < 0 || ih >= H || iw < 0 || iw >= W) return 0.f;
  return Xg[(((long long)img * C + ci) * H + ih) * W + iw];
}
"""
    params = ("const float* __restrict__ X, const float* __restrict__ Wt, "
              "const float* __restrict__ bias, float* __restrict__ Y, int M, int N, int K, "
              "int C, int Cg, int H, int W, int Cout, int OH, int OW, int KH, int KW, "
              "int sh, int sw, int ph, int pw, int dh, int dw")
    src = kernel_source(name, params, TEMPLATE.format(setup=setup, store=store), prelude=prelude)

    def impl(x, w, bias, y, M, N, K, C, Cg, H, W, Cout, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw):
        conv_numpy(x, w, bias, y, C, H, W, Cout, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw,
                   C // Cg, act)

    return KernelDef(name, src, impl, registers=72, shared_bytes=SHARED_BYTES)


def conv_numpy(x, w, bias, y, C, H, W, Cout, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, groups,
               act):
    """Reference convolution: im2col as a strided window view, then one tensordot per group."""
    n = x.size // (C * H * W)
    out = y.reshape(n, Cout, OH, OW)
    if KH == KW == 1 and sh == sw == 1 and ph == pw == 0 and groups == 1 and (OH, OW) == (H, W):
        np.matmul(w.reshape(Cout, C), x.reshape(n, C, H * W), out=out.reshape(n, Cout, H * W))
        out += bias.reshape(1, Cout, 1, 1)
        act_numpy(act, out)
        return
    hp = max(H + ph, (OH - 1) * sh + (KH - 1) * dh + 1)
    wp = max(W + pw, (OW - 1) * sw + (KW - 1) * dw + 1)
    xp = np.zeros((n, C, hp, wp), np.float32)
    xp[:, :, ph:ph + H, pw:pw + W] = x.reshape(n, C, H, W)
    s = xp.strides
    cols = np.lib.stride_tricks.as_strided(
        xp, (n, C, OH, OW, KH, KW), (s[0], s[1], s[2] * sh, s[3] * sw, s[2] * dh, s[3] * dw))
    cg, og = C // groups, Cout // groups
    wk = w.reshape(groups, og, cg, KH, KW)
    if cg == 1 and og == 1:  # depthwise: a weighted sum of shifted views, one per tap
        taps = wk[:, 0, 0]
        out[...] = 0
        for i in range(KH):
            for j in range(KW):
                out += cols[:, :, :, :, i, j] * taps[:, i, j].reshape(1, C, 1, 1)
    else:
        for g in range(groups):
            part = np.tensordot(cols[:, g * cg:(g + 1) * cg], wk[g], axes=([1, 4, 5], [1, 2, 3]))
            out[:, g * og:(g + 1) * og] = part.transpose(0, 3, 1, 2)
    out += bias.reshape(1, Cout, 1, 1)
    act_numpy(act, out)
