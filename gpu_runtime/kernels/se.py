"""Squeeze-excitation in one launch: per image, the channel means (from per-tile partial sums a
depthwise kernel left, or straight from the activation), FC -> act -> FC -> act, giving the
per-channel scale that the consumer applies while it loads (no separate multiply pass).

A block per image; warps take rows (a channel's partials, an FC output's dot product) and reduce
by shuffles in a fixed order, so the result is deterministic. At batch 1 the whole block is one
SM reading both weight matrices from L2, so it is latency-bound: 16 warps and unrolled loads keep
many reads in flight.
"""

from __future__ import annotations

import functools

import numpy as np

from gpu_runtime.kernels.bounds import Stretch, ints, register, trips
from gpu_runtime.kernels.source import (
    CTYPES,
    WARP_REDUCE,
    act_cuda,
    act_numpy,
    itemsize,
    kernel_source,
    storage_prelude,
    tag,
)
from gpu_runtime.program import KernelDef, Launch

THREADS = 512
MAX_CHANNELS = 4096  # C + hidden must fit the block's shared vector
SPAN = 1024  # a channel's values read between two flag checks


@functools.cache
def se(act1: str, act2: str, dtypes: tuple[str, str, str]) -> KernelDef:
    """Args: P [N, C, T] (sums or values), W1 [Cs, C], b1, W2 [C, Cs], b2, S [N, C]; C, Cs, T,
    count (the mean's divisor). dtypes: storage of (P, weights, S)."""
    tp, tw, ts = (CTYPES[d] for d in dtypes)
    name = f"atoll_se_{act1}_{act2}" + tag(dtypes)
    means = f"""    float s = 0.f;
    for (int t0 = 0; t0 < T; t0 += {SPAN}) {{  // a long channel checks the flag between spans
      if (t0) ATOLL_TILE_GUARD(atoll_preempt, stop);
      const int t1 = min(T, t0 + {SPAN});
      if (c < C) {{
#pragma unroll 4
        for (int t = t0 + lane; t < t1; t += 32) s += atoll_ld(p + (long long)c * T + t);
      }}
    }}
    s = atoll_warp_sum(s);
    if (lane == 0 && c < C) sv[c] = s / (float)count;"""
    fc1 = f"""    float s = 0.f;
#pragma unroll 4
    for (int c = lane; c < C; c += 32) s += atoll_ld(W1 + (long long)j * C + c) * sv[c];
    s = atoll_warp_sum(s) + atoll_ld(b1 + j);
    if (lane == 0) sv[C + j] = {act_cuda(act1, 's')};"""
    fc2 = f"""    float s = 0.f;
#pragma unroll 4
    for (int j = lane; j < Cs; j += 32) s += atoll_ld(W2 + (long long)c * Cs + j) * sv[C + j];
    s = atoll_warp_sum(s) + atoll_ld(b2 + c);
    if (lane == 0) atoll_st(S + (long long)n * C + c, {act_cuda(act2, 's')});"""
    body = f"""
  __shared__ float sv[{MAX_CHANNELS}];
  __shared__ int stop;
  const int n = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const {tp}* p = P + (long long)n * C * T;
{_rounds("C", "c", means, every_warp=True)}  ATOLL_TILE_GUARD(atoll_preempt, stop);  // between phases: a set flag stops the block
{_rounds("Cs", "j", fc1)}  ATOLL_TILE_GUARD(atoll_preempt, stop);
{_rounds("C", "c", fc2)}"""
    params = (f"const {tp}* __restrict__ P, const {tw}* __restrict__ W1, const {tw}* __restrict__ b1, "
              f"const {tw}* __restrict__ W2, const {tw}* __restrict__ b2, {ts}* __restrict__ S, "
              "int C, int Cs, int T, int count")
    src = kernel_source(name, params, body, prelude=storage_prelude(dtypes) + WARP_REDUCE)

    def impl(p, w1, b1, w2, b2, s, C, Cs, T, count):
        n = s.size // C
        mean = p.reshape(-1)[:n * C * T].reshape(n, C, T).astype(np.float32).sum(-1) / np.float32(count)
        h = act_numpy(act1, mean @ w1.reshape(Cs, C).T.astype(np.float32) + b1.reshape(-1))
        out = act_numpy(act2, h @ w2.reshape(C, Cs).T.astype(np.float32) + b2.reshape(-1))
        s.reshape(n, C)[...] = out

    register(name, functools.partial(_stretch, *map(itemsize, dtypes)))
    return KernelDef(name, src, impl, registers=32, shared_bytes=4 * MAX_CHANNELS)


def _rounds(count: str, index: str, body: str, every_warp: bool = False) -> str:
    """`body` for every `index` < `count`, a warp each, in rounds of one per warp that every
    thread makes, the flag checked between rounds (each warp's own sums keep their order).
    `every_warp`: the body runs in every warp and tests `index` < `count` itself (it has checks
    of its own inside)."""
    test = "" if every_warp else f"    if ({index} >= {count}) continue;\n"
    return (f"  for (int r0 = 0; r0 < {count}; r0 += nw) {{\n"
            f"    if (r0) ATOLL_TILE_GUARD(atoll_preempt, stop);\n"
            f"    const int {index} = r0 + warp;\n{test}{body}\n  }}\n")


def _stretch(sp: int, sw: int, ss: int, launch: Launch) -> tuple[Stretch, ...]:
    """One round of each phase (the means: one span of it): a warp's row is read 4 loads per
    lane per round trip (unrolled by 4), then its bias (the scale's stores do not wait)."""
    C, Cs, T = ints(launch)[:3]
    warps = launch.block[0] // 32

    def phase(length: int, size: int, extra: int) -> Stretch:
        return Stretch(warps * length * size, 2 * warps * length, trips(length, 32 * 4) + extra)

    return phase(min(T, SPAN), sp, 0), phase(C, sw, 1), phase(Cs, sw, 1)
