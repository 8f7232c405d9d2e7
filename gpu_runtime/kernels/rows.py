"""Row kernels: mean over an axis, (log-)softmax and layer norm.

A tensor is viewed as [outer, L, inner]; a row is the L elements at one (outer, inner) with stride
`inner`. Three shapes of work, picked by the lowering:
- 'warp': contiguous rows (inner = 1) of at most 1024 elements, a warp per row with the row in
  registers (PER = ceil(L / 32) values per lane), reductions by shuffles: Swin's 49-long softmax
  rows and 96..768-wide layer norms are one pass over memory, 8 rows per block;
- 'block': longer contiguous rows, a block per row (block-wide reductions, rows re-read from L1);
- 'cols': strided rows (inner > 1), a thread per row walking it, so a warp reads 32 neighbouring
  rows' elements together (coalesced).
"""

from __future__ import annotations

import functools

import numpy as np

from gpu_runtime.compiler.program import KernelDef
from gpu_runtime.kernels.source import BLOCK_REDUCE, CTYPES, kernel_source, storage_prelude, tag

OPS = ("mean", "softmax", "logsoftmax", "layernorm")
WARP_ROWS = 8  # rows per 256-thread block in the warp variant
PARAMS = ("const {tx}* __restrict__ X, const {tg}* __restrict__ G, const {tg}* __restrict__ Bt, "
          "{ty}* __restrict__ Y, int rows, int L, int inner, float eps")


def shape_of(L: int, inner: int) -> str:
    if inner > 1:
        return "cols"
    return "warp" if L <= 1024 else "block"


def grid(op_shape: str, rows: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) of a launch over `rows` rows."""
    if op_shape == "warp":
        return (-(-rows // WARP_ROWS), 1, 1), (32 * WARP_ROWS, 1, 1)
    if op_shape == "cols":
        return (-(-rows // 256), 1, 1), (256, 1, 1)
    return (max(1, min(rows, 65535)), 1, 1), (256, 1, 1)


def _finish(op: str, get: str, put) -> str:
    """Per-element output code given the max/sum/mean/rstd of the row (names m, s, mean, rstd)."""
    if op == "softmax":
        return put(f"expf({get} - m) * r")
    if op == "logsoftmax":
        return put(f"{get} - m - logf(s)")
    return put(f"({get} - mean) * rstd * atoll_ld(G + j) + atoll_ld(Bt + j)")


def _warp_body(op: str, per: int) -> str:
    load = (f"  float v[{per}];\n#pragma unroll\n  for (int q = 0; q < {per}; ++q) {{\n"
            "    const int j = lane + 32 * q;\n"
            "    v[q] = j < L ? atoll_ld(x + j) : 0.f;\n  }\n")
    loop = f"#pragma unroll\n  for (int q = 0; q < {per}; ++q) {{\n    const int j = lane + 32 * q;\n"
    body = ("  const int lane = threadIdx.x & 31;\n"
            f"  const int row = blockIdx.x * {WARP_ROWS} + (threadIdx.x >> 5);\n"
            "  if (row >= rows) return;\n"
            "  const auto* x = X + (long long)row * L;\n" + load)
    if op == "mean":
        return body + (f"  float s = 0.f;\n#pragma unroll\n  for (int q = 0; q < {per}; ++q) s += v[q];\n"
                       "  s = atoll_warp_sum(s);\n  if (lane == 0) atoll_st(Y + row, s / L);")
    put = lambda e: f"    if (j < L) atoll_st(Y + (long long)row * L + j, {e});\n  }}"  # noqa: E731
    if op in ("softmax", "logsoftmax"):
        body += (f"  float m = -3.402823466e38f;\n{loop}    if (j < L) m = fmaxf(m, v[q]);\n  }}\n"
                 f"  m = atoll_warp_max(m);\n  float s = 0.f;\n{loop}    if (j < L) s += expf(v[q] - m);\n  }}\n"
                 "  s = atoll_warp_sum(s);\n  const float r = 1.f / s;\n")
    else:
        body += (f"  float s = 0.f;\n#pragma unroll\n  for (int q = 0; q < {per}; ++q) s += v[q];\n"
                 "  const float mean = atoll_warp_sum(s) / L;\n  float d2 = 0.f;\n"
                 f"{loop}    if (j < L) d2 += (v[q] - mean) * (v[q] - mean);\n  }}\n"
                 "  const float rstd = rsqrtf(atoll_warp_sum(d2) / L + eps);\n")
    return body + loop + _finish(op, "v[q]", put)


def _block_body(op: str) -> str:
    body = ("  __shared__ float buf[33];\n  __shared__ int stop;\n"
            "  for (int row = blockIdx.x; row < rows; row += gridDim.x) {\n"
            "    ATOLL_TILE_GUARD(atoll_preempt, stop);\n"
            "    const auto* x = X + (long long)row * L;\n")
    loop = "    for (int j = threadIdx.x; j < L; j += blockDim.x)"
    if op == "mean":
        return body + (f"    float s = 0.f;\n{loop} s += atoll_ld(x + j);\n"
                       "    s = atoll_block_reduce(s, buf, false);\n"
                       "    if (threadIdx.x == 0) atoll_st(Y + row, s / L);\n  }")
    put = lambda e: f" atoll_st(Y + (long long)row * L + j, {e});\n  }}"  # noqa: E731
    if op in ("softmax", "logsoftmax"):
        body += (f"    float m = -3.402823466e38f;\n{loop} m = fmaxf(m, atoll_ld(x + j));\n"
                 f"    m = atoll_block_reduce(m, buf, true);\n    float s = 0.f;\n"
                 f"{loop} s += expf(atoll_ld(x + j) - m);\n"
                 "    s = atoll_block_reduce(s, buf, false);\n    const float r = 1.f / s;\n")
    else:
        body += (f"    float s = 0.f;\n{loop} s += atoll_ld(x + j);\n"
                 "    const float mean = atoll_block_reduce(s, buf, false) / L;\n    float d2 = 0.f;\n"
                 f"{loop} {{ const float d = atoll_ld(x + j) - mean; d2 += d * d; }}\n"
                 "    const float rstd = rsqrtf(atoll_block_reduce(d2, buf, false) / L + eps);\n")
    return body + loop + _finish(op, "atoll_ld(x + j)", put)


def _cols_body(op: str) -> str:
    body = ("  const int row = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "  if (row >= rows) return;\n"
            "  const long long base = (long long)(row / inner) * L * inner + row % inner;\n"
            "  const auto* x = X + base;\n")
    loop = "  for (int j = 0; j < L; ++j)"
    at = "atoll_ld(x + (long long)j * inner)"
    if op == "mean":
        return body + f"  float s = 0.f;\n{loop} s += {at};\n  atoll_st(Y + row, s / L);"
    put = lambda e: f" atoll_st(Y + base + (long long)j * inner, {e});"  # noqa: E731
    if op in ("softmax", "logsoftmax"):
        body += (f"  float m = -3.402823466e38f;\n{loop} m = fmaxf(m, {at});\n"
                 f"  float s = 0.f;\n{loop} s += expf({at} - m);\n  const float r = 1.f / s;\n")
        return body + loop + _finish(op, at, put)
    raise ValueError("layer norm over strided rows is not supported")


@functools.cache
def rows_kernel(op: str, op_shape: str, per: int, dtypes: tuple[str, str, str]) -> KernelDef:
    """`op` over rows with storage (X, G/B, Y) = dtypes; per = values per lane ('warp' only)."""
    assert op in OPS
    name = f"atoll_{op}_{op_shape}" + (str(per) if op_shape == "warp" else "") + tag(dtypes)
    body = {"warp": lambda: _warp_body(op, per), "block": lambda: _block_body(op),
            "cols": lambda: _cols_body(op)}[op_shape]()
    tx, tg, ty = (CTYPES[d] for d in dtypes)
    src = kernel_source(name, PARAMS.format(tx=tx, tg=tg, ty=ty), body,
                        prelude=storage_prelude(dtypes) + BLOCK_REDUCE)

    def impl(x, g, b, y, rows, L, inner, eps):
        v = x.reshape(-1, L, inner).astype(np.float32)
        out = y.reshape(-1, inner) if op == "mean" else y.reshape(-1, L, inner)
        if op == "mean":
            out[...] = v.mean(axis=1)
        elif op == "layernorm":
            mean = v.mean(axis=1, keepdims=True)
            d = v - mean
            var = (d * d).mean(axis=1, keepdims=True)
            out[...] = (d / np.sqrt(var + np.float32(eps)) * g.reshape(1, L, 1).astype(np.float32)
                        + b.reshape(1, L, 1).astype(np.float32))
        else:
            shifted = v - v.max(axis=1, keepdims=True)
            e = np.exp(shifted)
            total = e.sum(axis=1, keepdims=True)
            out[...] = shifted - np.log(total) if op == "logsoftmax" else e / total

    regs = 32 + (per if op_shape == "warp" else 8)
    return KernelDef(name, src, impl, registers=regs, shared_bytes=4 * 34)
