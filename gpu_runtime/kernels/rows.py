"""Row kernels (one block per row, block-wide reductions): mean over an axis, softmax, layer norm.

A tensor is viewed as [outer, L, inner]; a row is the L elements at one (outer, inner) with stride
inner. Blocks loop over rows and re-check the guard before each row.
"""

from __future__ import annotations

import functools

import numpy as np

from gpu_runtime.kernels.source import BLOCK_REDUCE, kernel_source
from gpu_runtime.compiler.program import KernelDef

ROW_LOOP = r"""
  __shared__ float buf[33];
  __shared__ int stop;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    ATOLL_TILE_GUARD(atoll_preempt, stop);
    const long long base = (long long)(row / inner) * L * inner + row % inner;
"""


def row_grid(rows: int) -> tuple[int, int, int]:
    return (max(1, min(rows, 65535)), 1, 1)


@functools.cache
def reduce_mean() -> KernelDef:
    name = "atoll_reduce_mean"
    body = ROW_LOOP + r"""
    float s = 0.f;
    for (int j = threadIdx.x; j < L; j += blockDim.x) s += X[base + (long long)j * inner];
    s = atoll_block_reduce(s, buf, false);
    if (threadIdx.x == 0) Y[row] = s / L;
  }"""
    src = kernel_source(name, "const float* __restrict__ X, float* __restrict__ Y, int rows, "
                        "int L, int inner", body, prelude=BLOCK_REDUCE)

    def impl(x, y, rows, L, inner):
        y.reshape(-1)[:] = x.reshape(-1, L, inner).mean(axis=1).reshape(-1)

    return KernelDef(name, src, impl, registers=32, shared_bytes=4 * 34)


@functools.cache
def softmax(log: bool = False) -> KernelDef:
    name = "atoll_log_softmax" if log else "atoll_softmax"
    write = "X[o] - m - logf(s)" if log else "expf(X[o] - m) * r"
    body = ROW_LOOP + r"""
    float m = -3.402823466e38f;
    for (int j = threadIdx.x; j < L; j += blockDim.x) m = fmaxf(m, X[base + (long long)j * inner]);
    m = atoll_block_reduce(m, buf, true);
    float s = 0.f;
    for (int j = threadIdx.x; j < L; j += blockDim.x) s += expf(X[base + (long long)j * inner] - m);
    s = atoll_block_reduce(s, buf, false);
    const float r = 1.f / s;
    for (int j = threadIdx.x; j < L; j += blockDim.x) {
      const long long o = base + (long long)j * inner;
      Y[o] = WRITE;
    }
  }""".replace("WRITE", write)
    src = kernel_source(name, "const float* __restrict__ X, float* __restrict__ Y, int rows, "
                        "int L, int inner", body, prelude=BLOCK_REDUCE)

    def impl(x, y, rows, L, inner):
        v = x.reshape(-1, L, inner)
        shifted = v - v.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        total = e.sum(axis=1, keepdims=True)
        y.reshape(-1, L, inner)[...] = shifted - np.log(total) if log else e / total

    return KernelDef(name, src, impl, registers=32, shared_bytes=4 * 34)


@functools.cache
def layer_norm() -> KernelDef:
    """Normalises contiguous rows (inner == 1) and applies per-position scale and shift."""
    name = "atoll_layer_norm"
    body = ROW_LOOP + r"""
    float s = 0.f;
    for (int j = threadIdx.x; j < L; j += blockDim.x) s += X[base + j];
    const float mean = atoll_block_reduce(s, buf, false) / L;
    float q = 0.f;
    for (int j = threadIdx.x; j < L; j += blockDim.x) {
      const float d = X[base + j] - mean;
      q += d * d;
    }
    const float rstd = rsqrtf(atoll_block_reduce(q, buf, false) / L + eps);
    for (int j = threadIdx.x; j < L; j += blockDim.x)
      Y[base + j] = (X[base + j] - mean) * rstd * G[j] + B[j];
  }"""
    src = kernel_source(name, "const float* __restrict__ X, const float* __restrict__ G, "
                        "const float* __restrict__ B, float* __restrict__ Y, int rows, int L, "
                        "int inner, float eps", body, prelude=BLOCK_REDUCE)

    def impl(x, g, b, y, rows, L, inner, eps):
        v = x.reshape(rows, L)
        mean = v.mean(axis=1, keepdims=True)
        d = v - mean
        var = (d * d).mean(axis=1, keepdims=True)
        y.reshape(rows, L)[...] = d / np.sqrt(var + np.float32(eps)) * g.reshape(-1) + b.reshape(-1)

    return KernelDef(name, src, impl, registers=40, shared_bytes=4 * 34)
