"""The fp16 tensor-core main loop of the GEMM family: mma.sync m16n8k16 (fp16 x fp16 -> fp32).

Same spec, operand addressing, split and epilogue as the SIMT loop in gemm.py; the shared tile is
fp16 (A in k-contiguous rows; B as [k][n] read with ldmatrix.trans or [n][k] read with ldmatrix),
and each of the 8 warps owns a (BM/WM) x (BN/WN) piece of the block tile as m16 x n8 fragments.
Operands of any storage type become fp16 on their way into shared memory; accumulation is fp32.
ldmatrix and mma are inline PTX (NVRTC through CuPy cannot include <mma.h>). Built with
ATOLL_EMULATOR, warp shuffles move the same elements to the same lanes as the PTX ISA's fragment
layouts (docs/gpu.md, "Kernels"), so the CPU emulator checks the fragment indexing.
"""

from __future__ import annotations

import functools

from gpu_runtime.kernels import gemm as g
from gpu_runtime.kernels.bounds import register
from gpu_runtime.kernels.source import kernel_source
from gpu_runtime.program import KernelDef

BK = 32
PAD = 8  # halves per smem row: 80-byte rows put the 8 rows of an ldmatrix in distinct banks

MMA_PRELUDE = r"""
__device__ __forceinline__ unsigned atoll_h2(float a, float b) {
  __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<unsigned*>(&h);
}
__device__ __forceinline__ void atoll_st4h(__half* p, float4 t) {
  *reinterpret_cast<uint2*>(p) = make_uint2(atoll_h2(t.x, t.y), atoll_h2(t.z, t.w));
}
#ifdef ATOLL_EMULATOR
__device__ __forceinline__ unsigned atoll_pack(__half lo, __half hi) {
  __half2 h = make_half2(lo, hi);
  return *reinterpret_cast<unsigned*>(&h);
}
__device__ __forceinline__ float2 atoll_unpack(unsigned u) {
  return __half22float2(*reinterpret_cast<__half2*>(&u));
}
template <int NM, bool TRANS>
__device__ __forceinline__ void atoll_ldsm(unsigned* r, const __half* base, int off) {
  const int lane = threadIdx.x & 31;
  for (int j = 0; j < NM; ++j) {
    if (TRANS) {
      const int r0 = __shfl_sync(0xffffffffu, off, 8 * j + 2 * (lane & 3));
      const int r1 = __shfl_sync(0xffffffffu, off, 8 * j + 2 * (lane & 3) + 1);
      r[j] = atoll_pack(base[r0 + (lane >> 2)], base[r1 + (lane >> 2)]);
    } else {
      const int row = __shfl_sync(0xffffffffu, off, 8 * j + (lane >> 2));
      r[j] = atoll_pack(base[row + 2 * (lane & 3)], base[row + 2 * (lane & 3) + 1]);
    }
  }
}
__device__ __forceinline__ void atoll_mma(float* d, const unsigned* a, const unsigned* b) {
  const int lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
  for (int src = 0; src < 4; ++src) {
    unsigned ra[4], rb0[2], rb1[2];
    for (int q = 0; q < 4; ++q) ra[q] = __shfl_sync(0xffffffffu, a[q], 4 * gid + src);
    for (int q = 0; q < 2; ++q) {
      rb0[q] = __shfl_sync(0xffffffffu, b[q], 4 * (2 * t) + src);
      rb1[q] = __shfl_sync(0xffffffffu, b[q], 4 * (2 * t + 1) + src);
    }
    for (int h = 0; h < 2; ++h) {  // k = 2 * src (+1) from regs 0/1, k + 8 from regs 2/3
      const float2 top = atoll_unpack(ra[2 * h]), bot = atoll_unpack(ra[2 * h + 1]);
      const float2 c0 = atoll_unpack(rb0[h]), c1 = atoll_unpack(rb1[h]);
      d[0] += top.x * c0.x + top.y * c0.y;
      d[1] += top.x * c1.x + top.y * c1.y;
      d[2] += bot.x * c0.x + bot.y * c0.y;
      d[3] += bot.x * c1.x + bot.y * c1.y;
    }
  }
}
#else
template <int NM, bool TRANS>
__device__ __forceinline__ void atoll_ldsm(unsigned* r, const __half* base, int off) {
  const unsigned addr = (unsigned)__cvta_generic_to_shared(base + off);
  if (NM == 4 && TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  else if (NM == 4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  else if (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void atoll_mma(float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif
"""


def warps(bm: int, bn: int) -> tuple[int, int]:
    """(WM, WN): the 8 warps of a block as a grid over the tile; None if the tile is too small."""
    wm = 2 if bm >= 32 else 1
    wn = 8 // wm
    if bm // wm < 16 or bn % (8 * wn):
        raise ValueError(f"no tensor-core layout for a {bm}x{bn} tile")
    return wm, wn


def fits(bm: int, bn: int) -> bool:
    try:
        warps(bm, bn)
    except ValueError:
        return False
    return True


def b_layout(spec: g.GemmSpec) -> str:
    """'nk' when B is k-contiguous (ldmatrix straight), else 'kn' (ldmatrix.trans)."""
    return "nk" if spec.b == "k4" else "kn"


def _smem(name: str, layout: str) -> g.Smem:
    """fp16 tile stores. layout 'mk' (A) / 'nk': rows of k; 'kn': rows of n (B)."""
    if layout in ("mk", "nk"):
        return g.Smem(
            along_k=lambda r, k, t: f"atoll_st4h(&{name}[nb][{r}][{k}], {t});",
            along_rows=lambda r, k, t: " ".join(
                f"{name}[nb][{r} + {i}][{k}] = __float2half_rn({t}.{c});"
                for i, c in enumerate("xyzw")),
            one=lambda r, k, v: f"{name}[nb][{r}][{k}] = __float2half_rn({v});")
    return g.Smem(
        along_k=lambda r, k, t: " ".join(
            f"{name}[nb][{k} + {i}][{r}] = __float2half_rn({t}.{c});" for i, c in enumerate("xyzw")),
        along_rows=lambda r, k, t: f"atoll_st4h(&{name}[nb][{k}][{r}], {t});",
        one=lambda r, k, v: f"{name}[nb][{k}][{r}] = __float2half_rn({v});")


def _fragments(spec: g.GemmSpec, mt: int, nt: int) -> str:
    """ldmatrix + mma for one k16 step `ks` of the current tile."""
    bn = spec.bn
    lines = [f"unsigned a[{mt}][4], b[{nt}][2];"]
    for i in range(mt):
        lines.append(f"atoll_ldsm<4, false>(a[{i}], &As[cur][0][0], (wm0 + {16 * i} + (lane & 15))"
                     f" * {BK + PAD} + ks + ((lane >> 4) << 3));")
    kn = b_layout(spec) == "kn"
    for j in range(0, nt, 2):
        if j + 1 < nt:
            if kn:
                off = (f"(ks + (lane & 7) + (((lane >> 3) & 1) << 3)) * {bn + PAD} + wn0 + {8 * j}"
                       " + ((lane >> 4) << 3)")
            else:
                off = (f"(wn0 + {8 * j} + (lane & 7) + ((lane >> 4) << 3)) * {BK + PAD} + ks"
                       " + (((lane >> 3) & 1) << 3)")
            lines.append(f"{{ unsigned t[4]; atoll_ldsm<4, {str(kn).lower()}>(t, &Bs[cur][0][0], "
                         f"{off}); b[{j}][0] = t[0]; b[{j}][1] = t[1]; b[{j + 1}][0] = t[2]; "
                         f"b[{j + 1}][1] = t[3]; }}")
        elif kn:
            lines.append(f"atoll_ldsm<2, true>(b[{j}], &Bs[cur][0][0], (ks + (lane & 15)) * "
                         f"{bn + PAD} + wn0 + {8 * j});")
        else:
            lines.append(f"atoll_ldsm<2, false>(b[{j}], &Bs[cur][0][0], (wn0 + {8 * j} + (lane & 7))"
                         f" * {BK + PAD} + ks + (((lane >> 3) & 1) << 3));")
    lines.append(f"for (int i = 0; i < {mt}; ++i) for (int j = 0; j < {nt}; ++j) "
                 "atoll_mma(acc[i][j], a[i], b[j]);")
    return "\n        ".join(lines)


def _body(spec: g.GemmSpec, splits: int) -> str:
    bm, bn = spec.bm, spec.bn
    wm_count, wn_count = warps(bm, bn)
    wtm, wtn = bm // wm_count, bn // wn_count
    mt, nt = wtm // 16, wtn // 8
    da, la, sa = g.loader(spec, "A", BK, _smem("As", "mk"))
    db, lb, sb = g.loader(spec, "B", BK, _smem("Bs", b_layout(spec)))
    bshape = f"[{BK}][{bn + PAD}]" if b_layout(spec) == "kn" else f"[{bn}][{BK + PAD}]"
    conv_setup = g.b_conv_setup(spec, "n0 + tid % BN") if spec.b == "conv" else ""
    step = f"""#pragma unroll
    for (int ks = 0; ks < {BK}; ks += 16) {{
        {_fragments(spec, mt, nt)}
    }}"""
    body = f"""
  __shared__ __align__(16) __half As[2][{bm}][{BK + PAD}];
  __shared__ __align__(16) __half Bs[2]{bshape};
  __shared__ int stop2[2];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm0 = (warp / {wn_count}) * {wtm}, wn0 = (warp % {wn_count}) * {wtn};
{g.zsetup(spec)}{conv_setup}  {da}
  {db}
  float acc[{mt}][{nt}][4];
#pragma unroll
  for (int i = 0; i < {mt}; ++i)
#pragma unroll
    for (int j = 0; j < {nt}; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
{g.pipeline(BK, la + lb, sa + sb, step)}  const int gid = lane >> 2, tig = lane & 3;
"""
    for i in range(mt):
        for h in range(2):
            body += f"  {{ const int m = m0 + wm0 + {16 * i + 8 * h} + gid;\n    if (m < M) {{\n"
            for j in range(nt):
                vals = [f"acc[{i}][{j}][{2 * h}]", f"acc[{i}][{j}][{2 * h + 1}]"]
                body += g.epilogue_row(spec, "m", f"(n0 + wn0 + {8 * j} + 2 * tig)", vals, "      ")
            body += "    }\n  }\n"
    return body.replace("BM", str(bm)).replace("BN", str(bn)).replace("SPLITS", str(splits))


def registers(bm: int, bn: int) -> int:
    """Registers per thread of a BM x BN tensor-core tile: 4 accumulators and ~2 fragment
    registers per m16n8 fragment of the warp, plus the next tile's staged loads (fitted to
    ptxas on sm_90)."""
    wm, wn = warps(bm, bn)
    fragments = (bm // wm // 16) * (bn // wn // 8)
    return 48 + 6 * fragments + (bm + bn) // 8


@functools.cache
def gemm(spec: g.GemmSpec, splits: int = 1) -> KernelDef:
    """The tensor-core kernel of `spec` (same arguments and reference as gemm.gemm)."""
    assert spec.split == (splits > 1)
    name = spec.name("hmma") + (f"_x{splits}" if splits > 1 else "")
    prelude = g.FASTDIV + g.storage_prelude(tuple(spec.dtypes) + ("float16",)) + MMA_PRELUDE
    src = kernel_source(name, g.params(spec), _body(spec, splits), prelude=prelude)
    shared = 2 * 2 * (spec.bm * (BK + PAD) + (BK * (spec.bn + PAD))) + 8
    register(name, functools.partial(g.tile_stretch, spec, BK, True))
    return KernelDef(name, src, functools.partial(g.reference, spec, splits),
                     registers=registers(spec.bm, spec.bn), shared_bytes=shared)
