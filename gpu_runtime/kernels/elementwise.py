"""Elementwise kernels: one template for unary maps, broadcasting binary ops and copies (Transpose,
Slice, Concat parts, casts between storage types), plus a constant fill.

The lowering collapses the index space first (compiler.lowering.common.collapse): adjacent
dimensions that every operand walks contiguously merge, so most launches are rank 1-3. A thread
splits its linear index with host-computed fast division (32-bit, no integer divide), and every
operand is addressed by its own strides, with dimension 0 optionally given by an int32 row table
(gathered rows). When the innermost dimension is contiguous (or broadcast) for every operand, a
thread moves 4 elements per access.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.special import erf

from gpu_runtime.kernels.bounds import Stretch, register
from gpu_runtime.kernels.source import (
    ACTS,
    CTYPES,
    FASTDIV,
    act_cuda,
    act_numpy,
    addresses,
    grid_stride,
    itemsize,
    kernel_source,
    storage_prelude,
    tag,
)
from gpu_runtime.program import KernelDef, Launch

# op -> (CUDA expression of {0} with parameters alpha/beta, NumPy function of (x, alpha, beta))
UNARY = {
    "copy": ("{0}", lambda x, a, b: x),
    "relu": ("fmaxf({0}, 0.f)", lambda x, a, b: np.maximum(x, 0)),
    "sigmoid": ("1.f / (1.f + expf(-{0}))", lambda x, a, b: 1 / (1 + np.exp(-x))),
    "swish": ("{0} / (1.f + expf(-{0}))", lambda x, a, b: x / (1 + np.exp(-x))),
    "hardsigmoid": ("fminf(fmaxf(alpha * {0} + beta, 0.f), 1.f)",
                    lambda x, a, b: np.clip(a * x + b, 0, 1)),
    "hardswish": ("{0} * fminf(fmaxf({0} + 3.f, 0.f), 6.f) * (1.f / 6.f)",
                  lambda x, a, b: x * np.clip(x + 3, 0, 6) / 6),
    "clip": ("fminf(fmaxf({0}, alpha), beta)", lambda x, a, b: np.clip(x, a, b)),
    "leakyrelu": ("{0} >= 0.f ? {0} : alpha * {0}", lambda x, a, b: np.where(x >= 0, x, a * x)),
    "erf": ("erff({0})", lambda x, a, b: erf(x)),
    "gelu": ("0.5f * {0} * (1.f + erff({0} * 0.70710678118654752f))",
             lambda x, a, b: ACTS["gelu"][1](x)),
    "tanh": ("tanhf({0})", lambda x, a, b: np.tanh(x)),
    "exp": ("expf({0})", lambda x, a, b: np.exp(x)),
    "log": ("logf({0})", lambda x, a, b: np.log(x)),
    "sqrt": ("sqrtf({0})", lambda x, a, b: np.sqrt(x)),
    "neg": ("-{0}", lambda x, a, b: -x),
    "abs": ("fabsf({0})", lambda x, a, b: np.abs(x)),
    "reciprocal": ("1.f / {0}", lambda x, a, b: 1 / x),
    "scale": ("alpha * {0}", lambda x, a, b: a * x),
}

# op -> (CUDA expression of {0}, {1}; NumPy function of (u, w))
BINARY = {
    "add": ("{0} + {1}", np.add),
    "sub": ("{0} - {1}", np.subtract),
    "mul": ("{0} * {1}", np.multiply),
    "div": ("{0} / {1}", np.divide),
    "pow": ("powf({0}, {1})", np.power),
    "max": ("fmaxf({0}, {1})", np.maximum),
    "min": ("fminf({0}, {1})", np.minimum),
    "mul_sigmoid": ("{0} / (1.f + expf(-{1}))", lambda u, w: u / (1 + np.exp(-w))),  # GLU
}


def op_arity(op: str) -> int:
    return 1 if op in UNARY else 2


@functools.cache
def ewise(op: str, act: str, rank: int, tables: tuple[bool, ...], inner: str | None,
          dtypes: tuple[str, ...]) -> KernelDef:
    """y = act(op(x0[, x1])) over a collapsed index space of `rank` dims.

    tables[j]: operand j (the output last) takes dimension 0 from an int32 row table. inner: None
    for scalar access, else one letter per operand (output last): 'c' the innermost dimension
    is contiguous (4-element accesses), 'b' it is broadcast (one load, splat). dtypes: storage of
    each operand, output last."""
    nin = op_arity(op)
    assert len(tables) == len(dtypes) == nin + 1 and rank >= 1
    name = (f"atoll_ew_{op}" + (f"_{act}" if act != "none" else "") + f"_{rank}"
            + ("v" + (inner or "") if inner else "") + ("_t" + "".join("01"[t] for t in tables)
                                                          if any(tables) else "") + tag(dtypes))
    ops = [f"x{j}" for j in range(nin)] + ["y"]
    params = []
    for j, (nm, dt, tb) in enumerate(zip(ops, dtypes, tables)):
        const = "const " if j < nin else ""
        params.append(f"{const}{CTYPES[dt]}* __restrict__ {nm}")
        if tb:
            params.append(f"const int* __restrict__ {nm}_rows")
    params.append("int n")
    params += [f"int d{d}, int m{d}, int h{d}" for d in range(1, rank)]
    for nm in ops:
        params.append(f"int {nm}_o, " + ", ".join(f"int {nm}_s{d}" for d in range(rank)))
    params.append("float alpha, float beta")

    lines = ["    int r = i, q;"]
    for d in range(rank - 1, 0, -1):
        lines.append(f"    q = atoll_div(r, m{d}, h{d}); const int i{d} = r - q * d{d}; r = q;")
    lines.append("    const int i0 = r;")
    for j, (nm, tb) in enumerate(zip(ops, tables)):
        terms = [f"{nm}_o"]
        for d in range(rank):
            if d == 0 and tb:
                terms.append(f"{nm}_rows[i0]")
            elif d == rank - 1 and inner:
                terms += [] if inner[j] == "b" else [f"(i{d} << 2)"]
            else:
                terms.append(f"i{d} * {nm}_s{d}")
        lines.append(f"    const int a_{nm} = " + " + ".join(terms) + ";")
    expr = UNARY[op][0] if nin == 1 else BINARY[op][0]
    if not inner:
        args = [f"atoll_ld(x{j} + a_x{j})" for j in range(nin)]
        lines.append(f"    atoll_st(y + a_y, {act_cuda(act, expr.format(*args))});")
    else:
        for j in range(nin):
            if inner[j] == "c":
                lines.append(f"    const float4 u{j} = atoll_ld4(x{j} + a_x{j});")
            else:
                lines.append(f"    const float s{j} = atoll_ld(x{j} + a_x{j});")
                lines.append(f"    const float4 u{j} = make_float4(s{j}, s{j}, s{j}, s{j});")
        comps = [act_cuda(act, expr.format(*[f"u{j}.{c}" for j in range(nin)])) for c in "xyzw"]
        lines.append(f"    atoll_st4(y + a_y, make_float4({', '.join(comps)}));")
    src = kernel_source(name, ", ".join(params), grid_stride("n", "\n".join(lines)),
                        prelude=FASTDIV + storage_prelude(dtypes))
    register(name, functools.partial(_ewise_stretch, 4 if inner else 1,
                                     sum(map(itemsize, dtypes)) + 4 * sum(tables), any(tables)))
    fn = UNARY[op][1] if nin == 1 else BINARY[op][1]

    def impl(*args):
        args = list(args)
        arrays, rows = [], []
        for tb in tables:
            arrays.append(args.pop(0).reshape(-1))
            rows.append(args.pop(0) if tb else None)
        n = args.pop(0)
        dims = [args[3 * d] for d in range(rank - 1)]
        del args[:3 * (rank - 1)]
        shape = [n // int(np.prod(dims, dtype=np.int64))] + dims
        if inner:
            shape[-1] *= 4
        addrs = []
        for j in range(nin + 1):
            off, strides = args[j * (rank + 1)], list(args[j * (rank + 1) + 1:(j + 1) * (rank + 1)])
            if inner:
                strides[-1] = 0 if inner[j] == "b" else 1
            addrs.append(addresses(off, shape, strides, rows[j]))
        alpha, beta = np.float32(args[-2]), np.float32(args[-1])
        vals = [arrays[j][addrs[j]].astype(np.float32) for j in range(nin)]
        out = fn(vals[0], alpha, beta) if nin == 1 else fn(*vals)
        arrays[nin][addrs[nin]] = act_numpy(act, np.asarray(out, np.float32))

    return KernelDef(name, src, impl, registers=32)


@functools.cache
def fill(dtype: str = "float32") -> KernelDef:
    name = "atoll_fill" + tag([dtype])
    body = grid_stride("n", "      atoll_st(y + i, value);")
    register(name, functools.partial(_ewise_stretch, 1, itemsize(dtype), False))

    def impl(y, n, value):
        y.reshape(-1)[:n] = value

    return KernelDef(name, kernel_source(name, f"{CTYPES[dtype]}* __restrict__ y, int n, float value",
                                         body, prelude=storage_prelude([dtype])), impl, registers=16)


def _ewise_stretch(per: int, nbytes: int, gathered: bool, launch: Launch) -> tuple[Stretch]:
    """One grid-stride pass of a block (each later pass checks the flag first): `per` elements
    of `nbytes` (every operand, row tables included) per thread, a table read before the loads."""
    threads = launch.block[0]
    return (Stretch(threads * per * nbytes, threads * per * 16, 1 + gathered),)
