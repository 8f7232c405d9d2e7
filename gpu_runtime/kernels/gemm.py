"""GEMM: matrix products and convolutions as one register-tiled template with fused epilogues.

    Y[z, m, n] = act(alpha * sum_k A[z, m, k] B[z, k, n] + bias + beta * C[z, m, n] * S[z0, m])

Operands are addressed by element strides, so transposes and broadcasts cost nothing (A rows may
be gathered through an int32 table); a convolution is an implicit im2col whose geometry is baked
into the source. Small problems take small tiles and, still short of blocks, a deterministic split
over K: each split writes an fp32 partial that a second launch sums in a fixed order (no atomics,
so results are bit-identical run to run). Two main loops share addressing and epilogue: fp32 SIMT
here, fp16 tensor cores in `mma.py`. The layout in detail: docs/gpu.md, "Kernels".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from gpu_runtime.kernels.bounds import Stretch, register
from gpu_runtime.kernels.conv import Geometry
from gpu_runtime.kernels.source import (
    CTYPES,
    FASTDIV,
    TAGS,
    act_cuda,
    act_numpy,
    addresses,
    grid_stride,
    itemsize,
    kernel_source,
    storage_prelude,
    strided,
)
from gpu_runtime.program import KernelDef, Launch

THREADS = 256
SPLIT_WORKSPACE = "float32"


@dataclass(frozen=True)
class GemmSpec:
    """Everything baked into one GEMM kernel variant (runtime sizes and strides are arguments).

    a: 'k4' A is k-contiguous (4-wide loads), 'm4' m-contiguous, 't4' rows from a table and
       k-contiguous, 's' any strides (scalar loads).
    b: 'n4' n-contiguous, 'k4' k-contiguous, 's' any strides, 'conv' implicit im2col.
    bias: '' | 'm' | 'n' (bias per row, indexed z1 * M + m so a grouped conv's groups each find
       theirs, or per column). addend: C term; scaled: C times S[z0, m];
    bscale: B rows scaled by S[z0, k] (a squeeze-excitation scale applied while loading).
    y: 'v' n-contiguous 4-wide stores, 's' scalar. split: write fp32 partials (epilogue later).
    dtypes: storage of (A, B, bias, C, S, Y)."""

    bm: int
    bn: int
    a: str
    b: str
    conv: Geometry | None = None
    bias: str = ""
    addend: bool = False
    scaled: bool = False
    bscale: bool = False
    act: str = "none"
    y: str = "s"
    split: bool = False
    dtypes: tuple[str, ...] = ("float32",) * 6

    @property
    def bk(self) -> int:
        return min(32, 1024 // max(self.bm, self.bn))

    def name(self, kind: str) -> str:
        parts = [f"atoll_{kind}_{self.bm}x{self.bn}", f"a{self.a}", f"b{self.b}"]
        if self.conv:
            parts.append(self.conv.tag)
        flags = (self.bias + ("c" if self.addend else "") + ("s" if self.scaled else "")
                 + ("g" if self.bscale else "") + ("k" if self.split else "") + self.y)
        parts.append(flags)
        if self.act != "none":
            parts.append(self.act)
        if any(d != "float32" for d in self.dtypes):
            parts.append("".join(TAGS[d] for d in self.dtypes))
        return "_".join(parts)


PARAM_NAMES = (
    ["A", "B", "bias", "C", "S", "rowsA", "Y", "M", "N", "K", "Z0", "Z1", "Z2", "kchunk"]
    + [f"{o}{s}" for o in "ABCY" for s in ("o", "0", "1", "2", "r", "c")]
    + ["So", "S0", "Sr", "cH", "cW", "cOW", "cOWm", "cOWh", "cP", "cPm", "cPh", "alpha", "beta"]
)


def params(spec: GemmSpec) -> str:
    """The uniform GEMM parameter list (unused pointers get any buffer; strides are elements).
    Operand strides are (offset, z0, z1, z2, row, column): rows are m (A, C, Y) or k (B)."""
    ta, tb, tbias, tc, ts, ty = (CTYPES[d] for d in spec.dtypes)
    out = ("float" if spec.split else ty)
    return (
        f"const {ta}* __restrict__ A, const {tb}* __restrict__ B, const {tbias}* __restrict__ bias, "
        f"const {tc}* __restrict__ C, const {ts}* __restrict__ S, const int* __restrict__ rowsA, "
        f"{out}* __restrict__ Y, int M, int N, int K, int Z0, int Z1, int Z2, int kchunk, "
        + ", ".join(f"int {o}{s}" for o in "ABCY" for s in ("o", "0", "1", "2", "r", "c"))
        + ", int So, int S0, int Sr, int cH, int cW, int cOW, int cOWm, int cOWh, int cP, int cPm,"
        " int cPh, float alpha, float beta"
    )


def coords_block(zb: str) -> str:
    """Batch coordinates (z0, z1, z2) of batch block `zb` (a conv has Z0 = Z2 = 1 and its
    groups in z1; its image z0 comes per column instead)."""
    return f"  const int z2 = {zb} % Z2, z1 = ({zb} / Z2) % Z1, z0 = {zb} / (Z1 * Z2);\n"


def column(spec: GemmSpec, n: str, out: str, width: int = 1) -> str:
    """Declares `{out}_z0` and `{out}_p` (image and pixel of conv column n; z0 and n otherwise).
    width 2 or 4: n is a multiple of it (P too), and the pixel is computed so the compiler can
    see it is (otherwise NVVM narrows a following vector store's alignment and splits it)."""
    if not spec.conv:
        return f"const int {out}_z0 = z0, {out}_p = {n};"
    shift = {1: 0, 2: 1, 4: 2}[width]
    pixel = (f"((({n}) >> {shift}) - {out}_z0 * (cP >> {shift})) << {shift}" if shift
             else f"{n} - {out}_z0 * cP")
    return f"const int {out}_z0 = atoll_div({n}, cPm, cPh), {out}_p = {pixel};"


def epilogue_scalar(spec: GemmSpec, m: str, n: str, v: str, indent: str = "      ") -> str:
    """Code that finishes accumulator value `v` at (m, n) and stores it (m < M, n < N known)."""
    i = indent
    if spec.split:
        return f"{i}Y[((long long)(split * zblocks + zb) * M + {m}) * N + {n}] = {v};\n"
    code = f"{i}{{ {column(spec, n, 'e')}\n"
    code += f"{i}  float v = alpha * {v};\n"
    if spec.bias:
        code += f"{i}  v += atoll_ld(bias + {'z1 * M + ' + m if spec.bias == 'm' else n});\n"
    if spec.addend:
        c = f"atoll_ld(C + Co + e_z0 * C0 + z1 * C1 + z2 * C2 + {m} * Cr + e_p * Cc)"
        if spec.scaled:
            c += f" * atoll_ld(S + So + e_z0 * S0 + {m} * Sr)"
        code += f"{i}  v += beta * {c};\n"
    code += (f"{i}  atoll_st(Y + Yo + e_z0 * Y0 + z1 * Y1 + z2 * Y2 + {m} * Yr + e_p * Yc, "
             f"{act_cuda(spec.act, 'v')});\n{i}}}\n")
    return code


def epilogue_row(spec: GemmSpec, m: str, n: str, vals: list[str], indent: str) -> str:
    """Finishes len(vals) consecutive columns n.. of row m: per element with bounds checks, or
    with y = 'v' one 2- or 4-wide store (the lowering asks for 'v' only when N, or a conv's P,
    is a multiple of 4 and every offset and stride but the unit one is too, so an aligned group
    lies in one image row and is wholly in or out of range)."""
    w = len(vals)
    if w not in (2, 4) or spec.y != "v":
        return "".join(f"{indent}if ({n} + {j} < N) {{\n"
                       + epilogue_scalar(spec, m, f"({n} + {j})", v, indent + "  ") + f"{indent}}}\n"
                       for j, v in enumerate(vals))
    comps = "xyzw"[:w]
    vec = f"float{w}"
    if spec.split:
        code = [f"*reinterpret_cast<{vec}*>(Y + ((long long)(split * zblocks + zb) * M + {m}) * N"
                f" + {n}) = make_{vec}({', '.join(vals)});"]
    else:
        code = [f"{column(spec, n, 'e', w)}", f"{vec} v;"]
        for j, c in enumerate(comps):
            code.append(f"v.{c} = alpha * {vals[j]};")
            if spec.bias == "n":
                code.append(f"v.{c} += atoll_ld(bias + {n} + {j});")
        if spec.bias == "m":
            code.append(f"{{ const float b = atoll_ld(bias + z1 * M + {m}); "
                        + " ".join(f"v.{c} += b;" for c in comps) + " }")
        if spec.addend:
            code.append("{ const int ca = Co + e_z0 * C0 + z1 * C1 + z2 * C2 + "
                        f"{m} * Cr + e_p * Cc;")
            scale = f" * atoll_ld(S + So + e_z0 * S0 + {m} * Sr)" if spec.scaled else ""
            code.append(f"  const float cs = beta{scale};")
            code += [f"  v.{c} += cs * atoll_ld(C + ca + {j} * Cc);" for j, c in enumerate(comps)]
            code.append("}")
        acts = ", ".join(act_cuda(spec.act, f"v.{c}") for c in comps)
        code.append(f"atoll_st{w}(Y + Yo + e_z0 * Y0 + z1 * Y1 + z2 * Y2 + {m} * Yr + e_p, "
                    f"make_{vec}({acts}));")
    body = "".join(f"{indent}  {line}\n" for line in code)
    return f"{indent}if ({n} < N) {{\n{body}{indent}}}\n"


def b_conv_setup(spec: GemmSpec, ncol: str) -> str:
    """Per-thread constants of one im2col column: image base, top-left input pixel, validity."""
    g = spec.conv
    return (f"    const int cn = {ncol};\n"
            f"    const bool c_ok = cn < N;\n"
            f"    const int c_img = atoll_div(c_ok ? cn : 0, cPm, cPh), c_p = (c_ok ? cn : 0) - c_img * cP;\n"
            f"    const int c_oh = atoll_div(c_p, cOWm, cOWh), c_ow = c_p - c_oh * cOW;\n"
            f"    const int c_ih0 = c_oh * {g.sh} - {g.ph}, c_iw0 = c_ow * {g.sw} - {g.pw};\n"
            f"    const int c_base = Bo + c_img * B0 + z1 * B1;\n")


def b_conv_load(spec: GemmSpec, k: str) -> str:
    """Expression loading im2col element (k, this thread's column) as float."""
    g = spec.conv
    taps = g.taps
    ci = f"(({k}) / {taps})" if taps > 1 else f"({k})"
    rest = f"(({k}) - {ci} * {taps})"
    kh = f"({rest} / {g.kw})" if g.kw > 1 else rest
    kw = f"({rest} - {kh} * {g.kw})" if g.kw > 1 else "0"
    ih = f"(c_ih0 + {kh} * {g.dh})" if g.kh > 1 else "c_ih0"
    iw = f"(c_iw0 + {kw} * {g.dw})" if g.kw > 1 else "c_iw0"
    checks = [f"({k}) < K", "c_ok"]
    if g.ph or g.kh > 1 or g.sh > 1:
        checks += [f"{ih} >= 0", f"{ih} < cH"]
    if g.pw or g.kw > 1 or g.sw > 1:
        checks += [f"{iw} >= 0", f"{iw} < cW"]
    load = f"atoll_ld(B + c_base + ({ci} * cH + {ih}) * cW + {iw})"
    if spec.bscale:
        load += f" * atoll_ld(S + So + c_img * S0 + {ci} * Sr)"
    return f"(({' && '.join(checks)}) ? {load} : 0.f)"


def _rows(t: int, total: int, lane: str) -> list[str]:
    """Row (or column) offsets of a thread's patch of t elements in a tile of `total`: groups of
    up to 4 consecutive elements, spread so neighbouring threads read neighbouring vectors."""
    w = min(t, 4)
    groups = t // w
    return [f"({g * (total // groups)} + {lane} * {w} + {i})" for g in range(groups)
            for i in range(w)]


def _vec_read(arr: str, idx: list[str], out: str) -> str:
    """Register loads of a thread's fragment from shared memory (float4/float2 where grouped)."""
    code = []
    w = min(len(idx), 4)
    for g in range(0, len(idx), w):
        base = idx[g]
        if w == 4:
            code.append(f"{{ const float4 t = *reinterpret_cast<const float4*>(&{arr}[{base}]); "
                        f"{out}[{g}] = t.x; {out}[{g + 1}] = t.y; {out}[{g + 2}] = t.z; "
                        f"{out}[{g + 3}] = t.w; }}")
        elif w == 2:
            code.append(f"{{ const float2 t = *reinterpret_cast<const float2*>(&{arr}[{base}]); "
                        f"{out}[{g}] = t.x; {out}[{g + 1}] = t.y; }}")
        else:
            code.append(f"{out}[{g}] = {arr}[{base}];")
    return " ".join(code)


@dataclass(frozen=True)
class Smem:
    """How a main loop lays an operand tile out in shared memory: code storing register values
    at (row, k) of the tile, where row is m for A and n for B. `along_k(r, k, t)` stores float4 t
    at k..k+3, `along_rows(r, k, t)` at rows r..r+3, `one(r, k, v)` a single float."""

    along_k: callable
    along_rows: callable
    one: callable


def loader(spec: GemmSpec, which: str, bk: int, smem: Smem, threads: int = THREADS
           ) -> tuple[str, str, str]:
    """(register declarations, global->register code for the tile at k = kt, register->shared
    code) of operand A or B: addressing, bounds and vector width come from the spec's mode."""
    size = spec.bm if which == "A" else spec.bn
    mode = spec.a if which == "A" else spec.b
    reg = "ra" if which == "A" else "rb"
    if mode == "conv":
        per = max(1, bk * size // threads)
        step = threads // size
        load, store = [], []
        for j in range(per):
            k = f"tid / {size} + {j * step}"
            guard = f"if ({k} < {bk}) " if bk * size < threads * per else ""
            load.append(f"    {guard}{reg}[{j}] = {b_conv_load(spec, f'kt + {k}')};")
            store.append(f"    {guard}{smem.one(f'tid % {size}', k, f'{reg}[{j}]')}")
        return f"float {reg}[{per}];", "\n".join(load) + "\n", "\n".join(store) + "\n"
    vec = mode != "s"
    count = size * bk // (4 if vec else 1)
    per = -(-count // threads)
    lim, g0 = ("M", "m0") if which == "A" else ("N", "n0")
    load, store = [], []
    for j in range(per):
        e = f"(tid + {j * threads})"
        guard = f"if ({e} < {count}) " if count % threads else ""
        if mode in ("k4", "t4"):  # 4 consecutive k of one row
            r, k = f"({e} / {bk // 4})", f"4 * ({e} % {bk // 4})"
            if which == "A":
                addr = ("A + Ao + za + " + ("rowsA[gr]" if mode == "t4" else "gr * Ar") + " + gk")
            else:
                addr = "B + Bo + zb_off + gr * Bc + gk"
            store.append(f"    {guard}{{ {smem.along_k(r, k, f'{reg}[{j}]')} }}")
        elif mode in ("m4", "n4"):  # 4 consecutive rows at one k
            r, k = f"4 * ({e} % {size // 4})", f"({e} / {size // 4})"
            addr = "A + Ao + za + gr + gk * Ac" if which == "A" else "B + Bo + zb_off + gk * Br + gr"
            store.append(f"    {guard}{{ {smem.along_rows(r, k, f'{reg}[{j}]')} }}")
        else:  # one element, rows fastest
            r, k = f"({e} % {size})", f"({e} / {size})"
            addr = ("A + Ao + za + gr * Ar + gk * Ac" if which == "A"
                    else "B + Bo + zb_off + gk * Br + gr * Bc")
            store.append(f"    {guard}{{ {smem.one(r, k, f'{reg}[{j}]')} }}")
        zero, ld = ("make_float4(0.f, 0.f, 0.f, 0.f)", "atoll_ld4") if vec else ("0.f", "atoll_ld")
        load.append(f"    {guard}{{ const int gr = {g0} + {r}, gk = kt + {k}; {reg}[{j}] = "
                    f"(gr < {lim} && gk < K) ? {ld}({addr}) : {zero}; }}")
    decl = f"{'float4' if vec else 'float'} {reg}[{per}];"
    return decl, "\n".join(load) + "\n", "\n".join(store) + "\n"


def _simt_smem(name: str) -> Smem:
    """fp32 tiles stored k-major ([BK][rows]) so a thread reads its rows as float4s."""
    return Smem(
        along_k=lambda r, k, t: " ".join(f"{name}[nb][{k} + {i}][{r}] = {t}.{c};"
                                         for i, c in enumerate("xyzw")),
        along_rows=lambda r, k, t: f"*reinterpret_cast<float4*>(&{name}[nb][{k}][{r}]) = {t};",
        one=lambda r, k, v: f"{name}[nb][{k}][{r}] = {v};")


def zsetup(spec: GemmSpec) -> str:
    """Block coordinates: tile origin, batch block and K split, batch offsets of A and B."""
    return ("  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;\n"
            "  const int zblocks = (int)gridDim.z / SPLITS;\n"
            "  const int zb = blockIdx.z % zblocks, split = blockIdx.z / zblocks;\n"
            + coords_block("zb")
            + "  const int za = z0 * A0 + z1 * A1 + z2 * A2;\n"
            "  const int zb_off = z0 * B0 + z1 * B1 + z2 * B2;\n"
            "  const int kbeg = split * kchunk, kend = min(K, kbeg + kchunk);\n")


def pipeline(bk: int, loads: str, stores: str, step: str) -> str:
    """The double-buffered K loop both main loops share: the next tile's global loads are issued
    before this tile's math (their latency hides behind it) and stored to the other shared
    buffer after; the guard is polled early and published at the loop's one barrier."""
    return f"""  int atoll_f = 0, it = 0, nb = 0, kt = kbeg;
  if (kt < kend) {{
{loads}{stores}  }}
  __syncthreads();
  for (int k0 = kbeg; k0 < kend; k0 += {bk}, ++it) {{
    const int cur = it & 1;
    nb = cur ^ 1;
    ATOLL_TILE_POLL(atoll_preempt, atoll_f);
    const bool more = k0 + {bk} < kend;
    kt = k0 + {bk};
    if (more) {{
{loads}    }}
{step}
    if (more) {{
{stores}    }}
    ATOLL_TILE_SYNC(atoll_f, stop2, it);
  }}
"""


def _simt_body(spec: GemmSpec, splits_macro: str) -> str:
    bm, bn, bk = spec.bm, spec.bn, spec.bk
    tm, tn = bm // 16, bn // 16
    rows, cols = _rows(tm, bm, "ty"), _rows(tn, bn, "tx")
    da, la, sa = loader(spec, "A", bk, _simt_smem("As"))
    db, lb, sb = loader(spec, "B", bk, _simt_smem("Bs"))
    conv_setup = b_conv_setup(spec, "n0 + tid % BN") if spec.b == "conv" else ""
    step = f"""#pragma unroll
    for (int kk = 0; kk < {bk}; ++kk) {{
      float a[{tm}], b[{tn}];
      {_vec_read("As[cur][kk]", rows, "a")}
      {_vec_read("Bs[cur][kk]", cols, "b")}
#pragma unroll
      for (int i = 0; i < {tm}; ++i)
#pragma unroll
        for (int j = 0; j < {tn}; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }}"""
    body = f"""
  __shared__ __align__(16) float As[2][{bk}][{bm} + 4];
  __shared__ __align__(16) float Bs[2][{bk}][{bn} + 4];
  __shared__ int stop2[2];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
{zsetup(spec)}{conv_setup}  {da}
  {db}
  float acc[{tm}][{tn}];
#pragma unroll
  for (int i = 0; i < {tm}; ++i)
#pragma unroll
    for (int j = 0; j < {tn}; ++j) acc[i][j] = 0.f;
{pipeline(bk, la + lb, sa + sb, step)}"""
    for i, r in enumerate(rows):
        body += f"  {{ const int m = m0 + {r};\n    if (m < M) {{\n"
        w = min(tn, 4)
        for g in range(0, tn, w):
            vals = [f"acc[{i}][{g + j}]" for j in range(w)]
            body += epilogue_row(spec, "m", f"(n0 + {cols[g]})", vals, "      ")
        body += "    }\n  }\n"
    return body.replace("BM", str(bm)).replace("BN", str(bn)).replace("SPLITS", splits_macro)


def prelude(spec: GemmSpec) -> str:
    return FASTDIV + storage_prelude(spec.dtypes)


def registers(bm: int, bn: int) -> int:
    """Registers per thread of a BM x BN SIMT tile: the accumulators, a row and a column of
    operands, addressing (fitted to ptxas on sm_90: within ~15% across the zoo's variants)."""
    tm, tn = bm // 16, bn // 16
    return 36 + tm * tn + 2 * (tm + tn)


@functools.cache
def gemm(spec: GemmSpec, splits: int = 1) -> KernelDef:
    """The fp32 SIMT kernel of `spec` (splits > 1 only with spec.split)."""
    assert spec.split == (splits > 1)
    name = spec.name("gemm") + (f"_x{splits}" if splits > 1 else "")
    src = kernel_source(name, params(spec), _simt_body(spec, str(splits)), prelude=prelude(spec))
    shared = 4 * 2 * spec.bk * (spec.bm + spec.bn + 8) + 8
    register(name, functools.partial(tile_stretch, spec, spec.bk, False))
    return KernelDef(name, src, functools.partial(reference, spec, splits),
                     registers=registers(spec.bm, spec.bn), shared_bytes=shared)


@functools.cache
def splitk_reduce(spec: GemmSpec, splits: int) -> KernelDef:
    """Sums the fp32 partials of a split GEMM in split order and applies `spec`'s epilogue
    (`spec.split` False). A is the partial buffer; one thread per output element."""
    assert not spec.split
    name = spec.name("gemmsum") + f"_x{splits}"
    each = f"""    const int m = e / N, n = e - m * N;
    float s = 0.f;
#pragma unroll
    for (int q = 0; q < {splits}; ++q) s += A[((long long)(q * zblocks + zb) * M + m) * N + n];
{epilogue_scalar(spec, "m", "n", "s", "    ")}"""
    body = f"""
  const int total = M * N;
  const int zblocks = (int)gridDim.y, zb = blockIdx.y;
{coords_block("zb")}{grid_stride("total", each, "e")}"""
    sp = params(spec).replace(f"const {CTYPES[spec.dtypes[0]]}* __restrict__ A",
                              "const float* __restrict__ A")
    src = kernel_source(name, sp, body, prelude=prelude(spec))
    register(name, functools.partial(_reduce_stretch, spec, splits))
    return KernelDef(name, src, functools.partial(reduce_reference, spec, splits), registers=32)


# ---- stretches between flag checks (kernels.bounds) ----------------------------------------------

def _epilogue_bytes(spec: GemmSpec) -> int:
    """Global bytes per output element of the epilogue (the output, the addend and its scale)."""
    out = 4 if spec.split else itemsize(spec.dtypes[5])
    return out + (itemsize(spec.dtypes[3]) if spec.addend else 0) + (
        itemsize(spec.dtypes[4]) if spec.scaled else 0)


def tile_stretch(spec: GemmSpec, bk: int, tensor: bool, launch: Launch) -> tuple[Stretch, ...]:
    """The longest of: launch -> first check (two K-tiles loaded, one multiplied), a K-tile
    between checks, and the last check -> end (the last tile multiplied, the epilogue)."""
    tile_bytes = bk * (spec.bm * itemsize(spec.dtypes[0]) + spec.bn * itemsize(spec.dtypes[1]))
    flops = 2 * spec.bm * spec.bn * bk
    return (Stretch(2 * tile_bytes, flops, 2, tensor),
            Stretch(spec.bm * spec.bn * _epilogue_bytes(spec), flops, 1 + spec.addend, tensor))


def _reduce_stretch(spec: GemmSpec, splits: int, launch: Launch) -> tuple[Stretch]:
    """One grid-stride pass of the split-K sum: per thread the splits' partials and the
    epilogue."""
    threads = launch.block[0]
    return (Stretch(threads * (4 * splits + _epilogue_bytes(spec)), threads * 2 * splits,
                    1 + spec.addend),)


# ---- NumPy reference --------------------------------------------------------------------------

def _named(args) -> dict:
    p = dict(zip(PARAM_NAMES, args))
    p["zblocks"] = p["Z0"] * p["Z1"] * p["Z2"]
    return p


def _zcoords(p: dict) -> np.ndarray:
    """(z0, z1, z2) per batch block."""
    zb = np.arange(p["zblocks"])
    return np.stack([zb // (p["Z1"] * p["Z2"]), (zb // p["Z2"]) % p["Z1"], zb % p["Z2"]], 1)


def _im2col(spec: GemmSpec, p: dict) -> np.ndarray:
    """[groups, K, N] implicit-im2col matrix of a conv B operand (zero padding, bscale applied)."""
    g, K, N = spec.conv, p["K"], p["N"]
    H, W, OW, P = p["cH"], p["cW"], p["cOW"], p["cP"]
    OH, nimg, cg = P // OW, N // P, K // g.taps
    xf = p["B"].reshape(-1).astype(np.float32)
    hp = max(H + g.ph, (OH - 1) * g.sh + (g.kh - 1) * g.dh + 1)
    wp = max(W + g.pw, (OW - 1) * g.sw + (g.kw - 1) * g.dw + 1)
    out = np.empty((p["zblocks"], K, N), np.float32)
    for z in range(p["zblocks"]):
        x = strided(xf, p["Bo"] + z * p["B1"], (nimg, cg, H, W), (p["B0"], H * W, W, 1))
        if spec.bscale:
            scale = strided(p["S"].reshape(-1).astype(np.float32), p["So"], (nimg, cg),
                            (p["S0"], p["Sr"]))
            x = x * scale[:, :, None, None]
        xp = np.zeros((nimg, cg, hp, wp), np.float32)
        xp[:, :, g.ph:g.ph + H, g.pw:g.pw + W] = x
        s = xp.strides
        cols = np.lib.stride_tricks.as_strided(
            xp, (nimg, cg, g.kh, g.kw, OH, OW),
            (s[0], s[1], s[2] * g.dh, s[3] * g.dw, s[2] * g.sh, s[3] * g.sw))
        out[z] = cols.transpose(1, 2, 3, 0, 4, 5).reshape(K, N)
    return out


def _operands(spec: GemmSpec, p: dict) -> tuple[np.ndarray, np.ndarray]:
    """A as [zblocks, M, K] and B as [zblocks, K, N], in fp32."""
    M, N, K = p["M"], p["N"], p["K"]
    z = _zcoords(p)
    af = p["A"].reshape(-1).astype(np.float32)
    rows = p["rowsA"] if spec.a == "t4" else None
    a = np.stack([af[addresses(p["Ao"] + int(o), (M, K), (p["Ar"], p["Ac"]), rows)]
                  for o in z @ np.array([p["A0"], p["A1"], p["A2"]])])
    if spec.conv:
        return a, _im2col(spec, p)
    bf = p["B"].reshape(-1).astype(np.float32)
    b = np.stack([strided(bf, p["Bo"] + int(o), (K, N), (p["Br"], p["Bc"]))
                  for o in z @ np.array([p["B0"], p["B1"], p["B2"]])])
    return a, b


def _epilogue(spec: GemmSpec, p: dict, acc: np.ndarray) -> None:
    """Finishes [zblocks, M, N] accumulators and stores them into Y through its strides."""
    z = _zcoords(p)
    zz = np.arange(p["zblocks"])[:, None, None]
    m = np.arange(p["M"])[None, :, None]
    n = np.arange(p["N"])[None, None, :]
    z1, z2 = z[:, 1][zz], z[:, 2][zz]
    z0, col = (n // p["cP"], n % p["cP"]) if spec.conv else (z[:, 0][zz], n)
    v = np.float32(p["alpha"]) * acc
    if spec.bias:
        bias = p["bias"].reshape(-1).astype(np.float32)
        v = v + (bias[z1 * p["M"] + m] if spec.bias == "m" else bias[n])
    if spec.addend:
        cf = p["C"].reshape(-1).astype(np.float32)
        c = cf[p["Co"] + z0 * p["C0"] + z1 * p["C1"] + z2 * p["C2"] + m * p["Cr"] + col * p["Cc"]]
        if spec.scaled:
            c = c * p["S"].reshape(-1).astype(np.float32)[p["So"] + z0 * p["S0"] + m * p["Sr"]]
        v = v + np.float32(p["beta"]) * c
    addr = p["Yo"] + z0 * p["Y0"] + z1 * p["Y1"] + z2 * p["Y2"] + m * p["Yr"] + col * p["Yc"]
    p["Y"].reshape(-1)[np.broadcast_to(addr, v.shape)] = act_numpy(spec.act, v.astype(np.float32))


def reference(spec: GemmSpec, splits: int, *args) -> None:
    p = _named(args)
    a, b = _operands(spec, p)
    if not spec.split:
        _epilogue(spec, p, np.matmul(a, b))
        return
    parts = p["Y"].reshape(splits, p["zblocks"], p["M"], p["N"])
    for q in range(splits):
        lo, hi = q * p["kchunk"], min(p["K"], (q + 1) * p["kchunk"])
        parts[q] = np.matmul(a[:, :, lo:hi], b[:, lo:hi, :])


def reduce_reference(spec: GemmSpec, splits: int, *args) -> None:
    p = _named(args)
    parts = p["A"].reshape(splits, p["zblocks"], p["M"], p["N"]).astype(np.float32)
    acc = parts[0].copy()
    for q in range(1, splits):
        acc += parts[q]
    _epilogue(spec, p, acc)
