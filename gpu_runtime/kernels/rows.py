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

from gpu_runtime.kernels.bounds import Stretch, ints, register, trips
from gpu_runtime.kernels.source import (
    BLOCK_REDUCE,
    CTYPES,
    itemsize,
    kernel_source,
    storage_prelude,
    tag,
)
from gpu_runtime.program import KernelDef, Launch

OPS = ("mean", "softmax", "logsoftmax", "layernorm")
WARP_ROWS = 8  # rows per 256-thread block in the warp variant
CHECK_EVERY = 4  # 'block' and 'cols' walks check the flag every this many steps
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


def _row_op(op: str, each, get: str, total, biggest, lead: str, out: str,
            live: str | None = None, before_store: str = "") -> str:
    """The op over one row, given how the row is walked: each(stmt) runs stmt for every
    element j this thread holds (its value is `get`), total/biggest reduce a per-thread
    value over the row's threads, `lead` is the thread that stores a row result, `out`
    the element address of j, `live` (if any) whether this thread's row exists and
    `before_store` code run before the pass that stores the row."""
    if op == "mean":
        return (f"  float s = 0.f;\n{each(f's += {get};')}  s = {total('s')};\n"
                f"  if ({lead}) atoll_st(Y + row, s / L);\n")
    if op in ("softmax", "logsoftmax"):
        code = (f"  float m = -3.402823466e38f;\n{each(f'm = fmaxf(m, {get});')}"
                f"  m = {biggest('m')};\n  float s = 0.f;\n{each(f's += expf({get} - m);')}"
                f"  s = {total('s')};\n  const float r = 1.f / s;\n")
        value = f"expf({get} - m) * r" if op == "softmax" else f"{get} - m - logf(s)"
    else:
        code = (f"  float s = 0.f;\n{each(f's += {get};')}  const float mean = {total('s')} / L;\n"
                f"  float d2 = 0.f;\n{each(f'const float d = {get} - mean; d2 += d * d;')}"
                f"  const float rstd = rsqrtf({total('d2')} / L + eps);\n")
        value = f"({get} - mean) * rstd * atoll_ld(G + j) + atoll_ld(Bt + j)"
    store = f"atoll_st(Y + {out}, {value});"
    return code + before_store + each(f"if ({live}) {store}" if live else store)


def _warp_body(op: str, per: int) -> str:
    def each(stmt):
        return (f"#pragma unroll\n  for (int q = 0; q < {per}; ++q) {{\n"
                f"    const int j = lane + 32 * q;\n    if (j < L) {{ {stmt} }}\n  }}\n")

    # Warps past the last row take the last row too (storing nothing): every thread reaches
    # the flag check between reading the rows and storing them.
    return ("  __shared__ int stop;\n  const int lane = threadIdx.x & 31;\n"
            f"  const int row0 = blockIdx.x * {WARP_ROWS} + (threadIdx.x >> 5);\n"
            "  const bool live = row0 < rows;\n  const int row = live ? row0 : rows - 1;\n"
            "  const auto* x = X + (long long)row * L;\n"
            f"  float v[{per}];\n" + each("v[q] = atoll_ld(x + j);")
            + _row_op(op, each, "v[q]", lambda e: f"atoll_warp_sum({e})",
                      lambda e: f"atoll_warp_max({e})", "live && lane == 0", "(long long)row * L + j",
                      live="live", before_store="  ATOLL_TILE_GUARD(atoll_preempt, stop);\n"))


def _block_body(op: str) -> str:
    def each(stmt):
        return (f"  for (int j0 = 0, q = 0; j0 < L; j0 += blockDim.x, ++q) {{\n"
                f"    if (q && !(q % {CHECK_EVERY})) ATOLL_TILE_GUARD(atoll_preempt, stop);\n"
                f"    const int j = j0 + threadIdx.x;\n    if (j < L) {{ {stmt} }}\n  }}\n")

    return ("  __shared__ float buf[33];\n  __shared__ int stop;\n"
            "  for (int row = blockIdx.x; row < rows; row += gridDim.x) {\n"
            "  ATOLL_TILE_GUARD(atoll_preempt, stop);\n"
            "  const auto* x = X + (long long)row * L;\n"
            + _row_op(op, each, "atoll_ld(x + j)", lambda e: f"atoll_block_reduce({e}, buf, false)",
                      lambda e: f"atoll_block_reduce({e}, buf, true)", "threadIdx.x == 0",
                      "(long long)row * L + j") + "  }")


def _cols_body(op: str) -> str:
    """Threads past the last row walk the last row too (storing nothing), so every thread of a
    block makes the same passes and reaches the flag checks."""
    def each(stmt):
        return (f"  for (int j = 0; j < L; ++j) {{\n"
                f"    if (j && !(j % {CHECK_EVERY})) ATOLL_TILE_GUARD(atoll_preempt, stop);\n"
                f"    {stmt}\n  }}\n")

    return ("  __shared__ int stop;\n"
            "  const int row0 = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "  const bool live = row0 < rows;\n"
            "  const int row = live ? row0 : rows - 1;\n"
            "  const long long base = (long long)(row / inner) * L * inner + row % inner;\n"
            "  const auto* x = X + base;\n"
            + _row_op(op, each, "atoll_ld(x + (long long)j * inner)", lambda e: e, lambda e: e,
                      "live", "base + (long long)j * inner", live="live"))


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
    register(name, functools.partial(_stretch, op, op_shape, *map(itemsize, dtypes)))
    return KernelDef(name, src, impl, registers=regs, shared_bytes=4 * 34)


def _stretch(op: str, op_shape: str, sx: int, sg: int, sy: int, launch: Launch) -> tuple[Stretch]:
    """'warp': a block's 8 rows read at once (loads unrolled: one round trip), then stored;
    'block' and 'cols': up to two runs of CHECK_EVERY steps (a pass's tail, the next pass's
    head), a dependent load each."""
    length = ints(launch)[1]
    per_elem = sx + (0 if op == "mean" else sy + (2 * sg if op == "layernorm" else 0))
    if op_shape == "warp":  # the rows read, then (after a check) stored with G and B
        params = 2 * length * sg if op == "layernorm" else 0
        return (Stretch(WARP_ROWS * length * sx, WARP_ROWS * length * 8, 1),
                Stretch(WARP_ROWS * length * (0 if op == "mean" else sy) + params,
                        WARP_ROWS * length * 8, 1))
    threads = launch.block[0]
    steps = min(2 * CHECK_EVERY, length if op_shape == "cols" else trips(length, threads))
    return (Stretch(steps * threads * per_elem, steps * threads * 8, steps),)
