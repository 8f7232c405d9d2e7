"""Shared pieces of the CUDA templates: the kernel wrapper with its guard, and index helpers.

Conventions every kernel follows (the executors rely on them): the first parameter is the guard
flag `atoll_preempt`; scalar parameters are only `int` and `float`; buffers are `float*`.
"""

from __future__ import annotations

import numpy as np

from gpu_runtime.compiler.program import GUARD_PROLOGUE

MAXD = 6  # rank limit of the strided copy and broadcast kernels (shapes are left-padded to it)
THREADS = 256

# Tiles re-check the flag through shared memory so every thread of a block leaves together
# (a per-thread read could split a block around a __syncthreads).
TILE_GUARD = r"""
#define ATOLL_TILE_GUARD(flag, stop) \
  do { if (threadIdx.x == 0) stop = *((volatile const int*)(flag)); __syncthreads(); \
       if (stop) return; } while (0)
"""

# Activations an epilogue may fuse, as CUDA expressions of `v` and NumPy functions (in place).
ACT_CUDA = {
    "none": "v",
    "relu": "fmaxf(v, 0.f)",
    "hardswish": "v * fminf(fmaxf(v + 3.f, 0.f), 6.f) * (1.f / 6.f)",
}


def act_numpy(name: str, y: np.ndarray) -> None:
    if name == "relu":
        np.maximum(y, 0, out=y)
    elif name == "hardswish":
        y *= np.clip(y + 3.0, 0.0, 6.0) * np.float32(1.0 / 6.0)


def kernel_source(name: str, params: str, body: str, prelude: str = "") -> str:
    """extern "C" kernel `name` whose first statement is the guard."""
    return (
        GUARD_PROLOGUE + TILE_GUARD + prelude
        + f'extern "C" __global__ void {name}(const int* __restrict__ atoll_preempt, {params}) {{\n'
        + "  ATOLL_GUARD(atoll_preempt);\n" + body + "\n}\n"
    )


def grid_1d(n: int, per_block: int = THREADS) -> tuple[int, int, int]:
    return (max(1, min((n + per_block - 1) // per_block, 65535 * 8)), 1, 1)


def pad_shape(shape, strides=None) -> tuple[list[int], list[int]]:
    """Left-pads a shape (and element strides) to MAXD dims: size 1, stride 0."""
    shape = list(shape)
    if len(shape) > MAXD:
        raise ValueError(f"rank {len(shape)} exceeds the kernels' limit of {MAXD}")
    strides = list(strides) if strides is not None else contiguous_strides(shape)
    k = MAXD - len(shape)
    return [1] * k + shape, [0] * k + strides


def contiguous_strides(shape) -> list[int]:
    out, acc = [], 1
    for d in reversed(list(shape)):
        out.append(acc)
        acc *= int(d)
    return out[::-1]


def strided(flat: np.ndarray, offset: int, shape, strides) -> np.ndarray:
    """A view of a flat float32 array with element strides (the CUDA kernels' addressing)."""
    base = flat[offset:] if offset >= 0 else flat
    return np.lib.stride_tricks.as_strided(
        base, shape=tuple(shape), strides=tuple(s * flat.itemsize for s in strides))


# index decomposition of a linear output index over MAXD dims, shared by copy and broadcast kernels
DECOMPOSE = r"""
#define ATOLL_DIMS_PARAMS int d0, int d1, int d2, int d3, int d4, int d5
#define ATOLL_STRIDE_PARAMS(p) int p##0, int p##1, int p##2, int p##3, int p##4, int p##5
__device__ __forceinline__ long long atoll_offset(long long r, int d0, int d1, int d2, int d3,
    int d4, int d5, int s0, int s1, int s2, int s3, int s4, int s5) {
  long long o = (r % d5) * s5; r /= d5;
  o += (r % d4) * s4; r /= d4;
  o += (r % d3) * s3; r /= d3;
  o += (r % d2) * s2; r /= d2;
  o += (r % d1) * s1; r /= d1;
  return o + r * s0;
}
#define ATOLL_OFFSET(i, p) atoll_offset((i), d0, d1, d2, d3, d4, d5, \
    p##0, p##1, p##2, p##3, p##4, p##5)
"""

# Block-wide sum/max of one float per thread (blockDim a multiple of 32, at most 1024); every
# thread gets the result. `buf` is __shared__ float[33]; calls may follow each other directly.
BLOCK_REDUCE = r"""
__device__ __forceinline__ float atoll_block_reduce(float v, float* buf, bool is_max) {
  for (int o = 16; o > 0; o >>= 1) {
    float t = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, t) : v + t;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)(blockDim.x >> 5) ? buf[lane] : (is_max ? -3.402823466e38f : 0.f);
    for (int o = 16; o > 0; o >>= 1) {
      float t = __shfl_xor_sync(0xffffffffu, v, o);
      v = is_max ? fmaxf(v, t) : v + t;
    }
    if (lane == 0) buf[32] = v;
  }
  __syncthreads();
  return buf[32];
}
"""
