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

from gpu_runtime.kernels.source import CTYPES, WARP_REDUCE, act_cuda, act_numpy, kernel_source, storage_prelude, tag
from gpu_runtime.program import KernelDef

THREADS = 512
MAX_CHANNELS = 4096  # C + hidden must fit the block's shared vector


@functools.cache
def se(act1: str, act2: str, dtypes: tuple[str, str, str]) -> KernelDef:
    """Args: P [N, C, T] (sums or values), W1 [Cs, C], b1, W2 [C, Cs], b2, S [N, C]; C, Cs, T,
    count (the mean's divisor). dtypes: storage of (P, weights, S)."""
    tp, tw, ts = (CTYPES[d] for d in dtypes)
    name = f"atoll_se_{act1}_{act2}" + tag(dtypes)
    body = f"""
  __shared__ float sv[{MAX_CHANNELS}];
  __shared__ int stop;
  const int n = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const {tp}* p = P + (long long)n * C * T;
  for (int c = warp; c < C; c += nw) {{
    float s = 0.f;
#pragma unroll 4
    for (int t = lane; t < T; t += 32) s += atoll_ld(p + (long long)c * T + t);
    s = atoll_warp_sum(s);
    if (lane == 0) sv[c] = s / (float)count;
  }}
  ATOLL_TILE_GUARD(atoll_preempt, stop);  // between phases: a set flag stops the block
  for (int j = warp; j < Cs; j += nw) {{
    float s = 0.f;
#pragma unroll 4
    for (int c = lane; c < C; c += 32) s += atoll_ld(W1 + (long long)j * C + c) * sv[c];
    s = atoll_warp_sum(s) + atoll_ld(b1 + j);
    if (lane == 0) sv[C + j] = {act_cuda(act1, 's')};
  }}
  ATOLL_TILE_GUARD(atoll_preempt, stop);
  for (int c = warp; c < C; c += nw) {{
    float s = 0.f;
#pragma unroll 4
    for (int j = lane; j < Cs; j += 32) s += atoll_ld(W2 + (long long)c * Cs + j) * sv[C + j];
    s = atoll_warp_sum(s) + atoll_ld(b2 + c);
    if (lane == 0) atoll_st(S + (long long)n * C + c, {act_cuda(act2, 's')});
  }}"""
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

    return KernelDef(name, src, impl, registers=32, shared_bytes=4 * MAX_CHANNELS)
