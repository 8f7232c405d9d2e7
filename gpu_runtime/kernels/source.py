"""Shared pieces of the CUDA templates: the kernel wrapper with its guard, storage types, fast
division, warp/block reductions and the NumPy addressing helpers.

Conventions every kernel follows (the executors rely on them): the first parameter is the guard
flag `atoll_preempt`; scalar parameters are only `int` and `float`; buffers are pointers to their
storage type (`float`, `__half`, or `int` for index tables). Whatever the storage, kernels compute
in fp32: `atoll_ld`/`atoll_st` convert at the memory boundary.
"""

from __future__ import annotations

import numpy as np
from scipy.special import erf

from gpu_runtime.program import GUARD_PROLOGUE

THREADS = 256
CTYPES = {"float32": "float", "float16": "__half", "int32": "int"}
TAGS = {"float32": "f", "float16": "h", "int32": "i"}

# Tiles re-check the flag through shared memory so every thread of a block leaves together
# (a per-thread read could split a block around a __syncthreads). ATOLL_TILE_GUARD is for loops
# with another barrier between two checks; pipelined loops poll early (the read's latency hides
# behind the tile's work) and publish at the barrier they already have, through two alternating
# slots: thread 0 may write the next slot before slow threads read this one, never this one.
TILE_GUARD = r"""
#define ATOLL_TILE_GUARD(flag, stop) \
  do { if (threadIdx.x == 0) stop = *((volatile const int*)(flag)); __syncthreads(); \
       if (stop) return; } while (0)
#define ATOLL_TILE_POLL(flag, f) do { if (threadIdx.x == 0) f = *((volatile const int*)(flag)); } while (0)
#define ATOLL_TILE_SYNC(f, stop2, it) \
  do { if (threadIdx.x == 0) stop2[(it) & 1] = f; __syncthreads(); if (stop2[(it) & 1]) return; } while (0)
"""

STORAGE_F32 = r"""
__device__ __forceinline__ float atoll_ld(const float* p) { return *p; }
__device__ __forceinline__ void atoll_st(float* p, float v) { *p = v; }
__device__ __forceinline__ float4 atoll_ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void atoll_st4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ void atoll_st2(float* p, float2 v) { *reinterpret_cast<float2*>(p) = v; }
"""

# Four halves move as one 8-byte word, so vector paths keep 4 elements per access in both types.
STORAGE_F16 = r"""
#ifndef ATOLL_EMULATOR  // the emulator brings its own __half
#include <cuda_fp16.h>
#endif
__device__ __forceinline__ float atoll_ld(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void atoll_st(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ float4 atoll_ld4(const __half* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);  // one 8-byte access
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
  return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ void atoll_st4(__half* p, float4 v) {
  const __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
  *reinterpret_cast<uint2*>(p) = make_uint2(*reinterpret_cast<const unsigned*>(&a),
                                            *reinterpret_cast<const unsigned*>(&b));
}
__device__ __forceinline__ void atoll_st2(__half* p, float2 v) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(v.x, v.y);
}
"""

# n / d for 0 <= n < 2^31 with a host-computed (magic, shift) pair (see fastdiv): a multiply-high
# (one IMAD.WIDE.U32) and a shift instead of a ~20-instruction integer division on every element.
FASTDIV = r"""
__device__ __forceinline__ int atoll_div(int n, int magic, int shift) {
  const unsigned hi = (unsigned)(((unsigned long long)(unsigned)n * (unsigned)magic) >> 32);
  return (int)((hi + (unsigned)n) >> shift);
}
"""

WARP_REDUCE = r"""
__device__ __forceinline__ float atoll_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float atoll_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
"""

# Block-wide sum/max of one float per thread (blockDim a multiple of 32, at most 1024); every
# thread gets the result. `buf` is __shared__ float[33]; calls may follow each other directly.
BLOCK_REDUCE = WARP_REDUCE + r"""
__device__ __forceinline__ float atoll_block_reduce(float v, float* buf, bool is_max) {
  v = is_max ? atoll_warp_max(v) : atoll_warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)(blockDim.x >> 5) ? buf[lane] : (is_max ? -3.402823466e38f : 0.f);
    v = is_max ? atoll_warp_max(v) : atoll_warp_sum(v);
    if (lane == 0) buf[32] = v;
  }
  __syncthreads();
  return buf[32];
}
"""

# Activations an epilogue may apply, as CUDA expressions of {0}, beside their NumPy form
# (hardsigmoid is torch's: alpha 1/6, beta 0.5; other parameters stay a separate launch).
ACTS = {
    "none": ("{0}", lambda x: x),
    "relu": ("fmaxf({0}, 0.f)", lambda x: np.maximum(x, 0)),
    "hardswish": ("{0} * fminf(fmaxf({0} + 3.f, 0.f), 6.f) * (1.f / 6.f)",
                  lambda x: x * np.clip(x + 3.0, 0.0, 6.0) * np.float32(1.0 / 6.0)),
    "hardsigmoid": ("fminf(fmaxf({0} * (1.f / 6.f) + 0.5f, 0.f), 1.f)",
                    lambda x: np.clip(x * np.float32(1.0 / 6.0) + 0.5, 0.0, 1.0)),
    "sigmoid": ("1.f / (1.f + expf(-{0}))", lambda x: 1 / (1 + np.exp(-x))),
    "swish": ("{0} / (1.f + expf(-{0}))", lambda x: x / (1 + np.exp(-x))),
    "gelu": ("0.5f * {0} * (1.f + erff({0} * 0.70710678118654752f))",
             lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2)))),
}


def act_cuda(act: str, value: str) -> str:
    """The CUDA expression of activation `act` applied to the expression `value`."""
    return value if act == "none" else "(" + ACTS[act][0].format(f"({value})") + ")"


def act_numpy(act: str, y: np.ndarray) -> np.ndarray:
    return ACTS[act][1](y).astype(np.float32, copy=False)


def storage_prelude(dtypes) -> str:
    """load/store helpers for the storage types a kernel touches (cuda_fp16.h only when needed:
    it is most of an fp32 kernel's NVRTC compile time)."""
    return STORAGE_F32 + (STORAGE_F16 if "float16" in dtypes else "")


def grid_stride(n: str, body: str, index: str = "i") -> str:
    """A block-uniform grid-stride loop over `index` < n running `body`: every thread of a block
    makes the same passes, so each pass after the first can check the flag first and a set flag
    stops the block between passes (one pass moves a few KB; a large n gives many)."""
    base = f"{index}_pass"
    return (f"  __shared__ int atoll_pass_stop;\n"
            f"  for (int {base} = blockIdx.x * blockDim.x; {base} < {n};"
            f" {base} += gridDim.x * blockDim.x) {{\n"
            f"    if ({base} != (int)(blockIdx.x * blockDim.x))"
            f" ATOLL_TILE_GUARD(atoll_preempt, atoll_pass_stop);\n"
            f"    const int {index} = {base} + threadIdx.x;\n"
            f"    if ({index} < {n}) {{\n{body}\n    }}\n  }}\n")


def itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


def kernel_source(name: str, params: str, body: str, prelude: str = "") -> str:
    """extern "C" kernel `name` whose first statement is the guard."""
    return (
        GUARD_PROLOGUE + TILE_GUARD + prelude
        + f'extern "C" __global__ void {name}(const int* __restrict__ atoll_preempt, {params}) {{\n'
        + "  ATOLL_GUARD(atoll_preempt);\n" + body + "\n}\n"
    )


def tag(dtypes) -> str:
    """A short name suffix for a kernel's storage types ('' when everything is float32)."""
    dtypes = list(dtypes)
    return "" if all(d == "float32" for d in dtypes) else "_" + "".join(TAGS[d] for d in dtypes)


def fastdiv(d: int) -> tuple[int, int]:
    """(magic, shift) for atoll_div by d >= 1; the magic is passed as a (wrapped) signed int."""
    shift = (d - 1).bit_length()
    magic = ((1 << 32) * ((1 << shift) - d)) // d + 1
    return (magic - (1 << 32) if magic >= 1 << 31 else magic), shift


def grid_1d(n: int, per_block: int = THREADS, cap: int = 1 << 16) -> tuple[int, int, int]:
    return (max(1, min((n + per_block - 1) // per_block, cap)), 1, 1)


def contiguous_strides(shape) -> list[int]:
    out, acc = [], 1
    for d in reversed(list(shape)):
        out.append(acc)
        acc *= int(d)
    return out[::-1]


def strided(flat: np.ndarray, offset: int, shape, strides) -> np.ndarray:
    """A view of a flat array at an element offset with element strides (the kernels' addressing;
    strides may be negative or zero)."""
    return np.lib.stride_tricks.as_strided(
        flat[offset:] if offset >= 0 else flat, shape=tuple(shape),
        strides=tuple(s * flat.itemsize for s in strides))


def addresses(offset: int, shape, strides, table: np.ndarray | None = None) -> np.ndarray:
    """Element addresses of a (possibly row-gathered) operand: table[i0] + i0.. strides (the first
    stride is ignored when a table gives dimension 0)."""
    idx = np.full((1,) * len(shape), offset, np.int64)
    for d, (n, s) in enumerate(zip(shape, strides)):
        axis_shape = [1] * len(shape)
        axis_shape[d] = n
        if d == 0 and table is not None:
            idx = idx + table.astype(np.int64).reshape(axis_shape)
        else:
            idx = idx + (np.arange(n, dtype=np.int64) * s).reshape(axis_shape)
    return np.broadcast_to(idx, tuple(shape))
