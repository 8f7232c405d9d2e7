"""The strided copy: Transpose, Slice, Concat, Split, Expand and Pad's interior are all one kernel
y[yo + sum(i_d * ys_d)] = x[xo + sum(i_d * xs_d)] over an index space of up to MAXD dims."""

from __future__ import annotations

import functools

from gpu_runtime.kernels.source import DECOMPOSE, MAXD, kernel_source, strided
from gpu_runtime.compiler.program import KernelDef


@functools.cache
def copy() -> KernelDef:
    name = "atoll_strided_copy"
    body = (
        "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;"
        " i += (long long)gridDim.x * blockDim.x)\n"
        "    y[yo + ATOLL_OFFSET(i, ys)] = x[xo + ATOLL_OFFSET(i, xs)];"
    )
    src = kernel_source(
        name, "const float* __restrict__ x, float* __restrict__ y, int n, int xo, int yo, "
        "ATOLL_DIMS_PARAMS, ATOLL_STRIDE_PARAMS(xs), ATOLL_STRIDE_PARAMS(ys)",
        body, prelude=DECOMPOSE)

    def impl(x, y, n, xo, yo, *rest):
        dims, xs, ys = rest[:MAXD], rest[MAXD:2 * MAXD], rest[2 * MAXD:]
        xf, yf = x.reshape(-1), y.reshape(-1)
        strided(yf[yo:], 0, dims, ys)[...] = strided(xf[xo:], 0, dims, xs)

    return KernelDef(name, src, impl, registers=40)
