"""Elementwise kernels: unary maps, broadcasting binary ops, constant fill (grid-stride loops)."""

from __future__ import annotations

import functools

import numpy as np
from scipy.special import erf

from gpu_runtime.kernels.source import DECOMPOSE, MAXD, kernel_source, strided
from gpu_runtime.compiler.program import KernelDef

# op -> (CUDA expression of v with parameters alpha/beta, NumPy function of (x, alpha, beta))
UNARY = {
    "relu": ("fmaxf(v, 0.f)", lambda x, a, b: np.maximum(x, 0)),
    "sigmoid": ("1.f / (1.f + expf(-v))", lambda x, a, b: 1 / (1 + np.exp(-x))),
    "swish": ("v / (1.f + expf(-v))", lambda x, a, b: x / (1 + np.exp(-x))),
    "hardsigmoid": ("fminf(fmaxf(alpha * v + beta, 0.f), 1.f)",
                    lambda x, a, b: np.clip(a * x + b, 0, 1)),
    "hardswish": ("v * fminf(fmaxf(v + 3.f, 0.f), 6.f) * (1.f / 6.f)",
                  lambda x, a, b: x * np.clip(x + 3, 0, 6) / 6),
    "clip": ("fminf(fmaxf(v, alpha), beta)", lambda x, a, b: np.clip(x, a, b)),
    "leakyrelu": ("v >= 0.f ? v : alpha * v", lambda x, a, b: np.where(x >= 0, x, a * x)),
    "erf": ("erff(v)", lambda x, a, b: erf(x)),
    "gelu": ("0.5f * v * (1.f + erff(v * 0.70710678118654752f))",
             lambda x, a, b: 0.5 * x * (1 + erf(x / np.sqrt(2)))),
    "tanh": ("tanhf(v)", lambda x, a, b: np.tanh(x)),
    "exp": ("expf(v)", lambda x, a, b: np.exp(x)),
    "log": ("logf(v)", lambda x, a, b: np.log(x)),
    "sqrt": ("sqrtf(v)", lambda x, a, b: np.sqrt(x)),
    "neg": ("-v", lambda x, a, b: -x),
    "abs": ("fabsf(v)", lambda x, a, b: np.abs(x)),
    "reciprocal": ("1.f / v", lambda x, a, b: 1 / x),
}

# op -> (CUDA expression of u, w; NumPy ufunc)
BINARY = {
    "add": ("u + w", np.add),
    "sub": ("u - w", np.subtract),
    "mul": ("u * w", np.multiply),
    "div": ("u / w", np.divide),
    "pow": ("powf(u, w)", np.power),
    "max": ("fmaxf(u, w)", np.maximum),
    "min": ("fminf(u, w)", np.minimum),
}


@functools.cache
def unary(op: str) -> KernelDef:
    expr, fn = UNARY[op]
    name = f"atoll_unary_{op}"
    body = (
        "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;"
        " i += (long long)gridDim.x * blockDim.x) {\n"
        f"    float v = x[i];\n    y[i] = {expr};\n  }}"
    )
    src = kernel_source(name, "const float* __restrict__ x, float* __restrict__ y, int n, "
                        "float alpha, float beta", body)

    def impl(x, y, n, alpha, beta):
        y.reshape(-1)[:n] = fn(x.reshape(-1)[:n], np.float32(alpha), np.float32(beta))

    return KernelDef(name, src, impl, registers=24)


@functools.cache
def binary(op: str) -> KernelDef:
    """y = a (op) b with NumPy broadcasting expressed as per-operand strides (0 on broadcast dims)."""
    expr, ufunc = BINARY[op]
    name = f"atoll_binary_{op}"
    body = (
        "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;"
        " i += (long long)gridDim.x * blockDim.x) {\n"
        "    float u = a[ATOLL_OFFSET(i, sa)], w = b[ATOLL_OFFSET(i, sb)];\n"
        f"    y[i] = {expr};\n  }}"
    )
    src = kernel_source(
        name, "const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y, "
        "int n, ATOLL_DIMS_PARAMS, ATOLL_STRIDE_PARAMS(sa), ATOLL_STRIDE_PARAMS(sb)",
        body, prelude=DECOMPOSE)

    def impl(a, b, y, n, *rest):
        dims, sa, sb = rest[:MAXD], rest[MAXD:2 * MAXD], rest[2 * MAXD:]
        ufunc(strided(a.reshape(-1), 0, dims, sa), strided(b.reshape(-1), 0, dims, sb),
              out=y.reshape(dims))

    return KernelDef(name, src, impl, registers=40)


@functools.cache
def fill() -> KernelDef:
    name = "atoll_fill"
    body = (
        "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;"
        " i += (long long)gridDim.x * blockDim.x) y[i] = value;"
    )

    def impl(y, n, value):
        y.reshape(-1)[:n] = value

    return KernelDef(name, kernel_source(name, "float* __restrict__ y, int n, float value", body),
                     impl, registers=16)
