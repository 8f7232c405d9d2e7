"""GEMM calls: MatMul, Gemm and every convolution that is not depthwise become one GemmCall.

The call keeps its operands as views and its epilogue as data, so later nodes can still patch it
(an activation, a scale, a residual addend, a destination in the consumer's layout) before the
launch is final. At emission it frames each operand in the kernel's (z0, z1, z2, row, column)
coordinates, picks each operand's access mode (vector loads where the layout allows), a tile and
a K split from the problem size, and the SIMT (fp32) or tensor-core (fp16) main loop.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from gpu_runtime.compiler import view as V
from gpu_runtime.compiler.graph import Call, ProgramBuilder, Tensor, View, make_launch
from gpu_runtime.compiler.lowering.common import prod
from gpu_runtime.kernels import gemm as G
from gpu_runtime.kernels import mma
from gpu_runtime.kernels.conv import Geometry
from gpu_runtime.kernels.source import fastdiv

SMS = 132  # streaming multiprocessors the tiling targets (H100 SXM); fewer only wastes a wave
TILE_LATENCY = 600  # cycles a tile step costs at least (the next tile's global loads)
SPLIT_COST = 3500  # cycles a split's extra launch costs (a graph node plus its memory pass)
SIMT_TILES = [(bm, bn) for bm in (16, 32, 64, 128) for bn in (16, 32, 64, 128)]
MMA_TILES = [(bm, bn) for bm, bn in SIMT_TILES if mma.fits(bm, bn)]


def _cost(bm: int, bn: int, kchunk: int, blocks: int, tensor_cores: bool) -> float:
    """Estimated cycles of one launch: waves of resident blocks, each tile step bound by issue
    or by latency."""
    if tensor_cores:
        bk = mma.BK
        wm, wn = mma.warps(bm, bn)
        frags = (bm // wm // 16) * (bn // wn // 8)
        instr = 8 * (bk // 16) * (frags * 2 + bm // wm // 16 + bn // wn // 16 + 4) + 8 * 40
        regs = mma.registers(bm, bn)
    else:
        bk = G.GemmSpec(bm, bn, "s", "s").bk
        tm, tn = bm // 16, bn // 16
        instr = 8 * bk * (tm * tn + (tm + tn) / 2 + 2) + 8 * 40
        regs = G.registers(bm, bn)
    occ = max(1, min(8, 65536 // (256 * regs)))
    occ = min(occ, math.ceil(blocks / SMS))
    waves = math.ceil(blocks / (SMS * occ))
    steps = math.ceil(kchunk / bk)
    return waves * steps * max(occ * instr / 4, TILE_LATENCY)


def choose_tile(M: int, N: int, K: int, zblocks: int, tensor_cores: bool
                ) -> tuple[int, int, int, int]:
    """(BM, BN, splits, kchunk) with the least estimated time (splits > 1: a second launch
    sums the fp32 partials in a fixed order). Ties (a single latency-bound wave) go to the
    choice spreading over more SMs (up to two blocks each: more memory in flight), then to
    the larger tile."""
    best = None
    for bm, bn in (MMA_TILES if tensor_cores else SIMT_TILES):
        bk = mma.BK if tensor_cores else G.GemmSpec(bm, bn, "s", "s").bk
        for splits in (1, 2, 4, 8, 16):
            kchunk = math.ceil(K / splits / bk) * bk
            if splits > 1 and (kchunk * (splits - 1) >= K or kchunk < 4 * bk):
                continue
            blocks = math.ceil(M / bm) * math.ceil(N / bn) * zblocks * splits
            cost = _cost(bm, bn, kchunk, blocks, tensor_cores)
            if splits > 1:
                cost += SPLIT_COST + splits * M * N * zblocks * 8 / 2000
            key = (cost, -min(blocks, 2 * SMS), -bm * bn)
            if best is None or key < best[0]:
                best = (key, (bm, bn, splits, kchunk))
    return best[1]


def _affine(v: View) -> tuple[int, list[int]] | None:
    return (v.offset, list(v.strides)) if v.affine else None


def _aligned(offset: int, strides) -> bool:
    return offset % 4 == 0 and all(s % 4 == 0 for s in strides)


@dataclass(frozen=True)
class ConvInput:
    """The implicit-im2col B operand: a contiguous NCHW input and the baked geometry."""

    x: Tensor
    geom: Geometry
    H: int
    W: int
    OH: int
    OW: int
    groups: int
    scale: View | None = None  # per (image, input channel), applied while loading


@dataclass(frozen=True)
class GemmCall(Call):
    """dest/addend are views in the call's logical output coordinates (`lshape`); a is
    [Z0, Z1, Z2, M, K] (a conv: [1, groups, 1, M, Kpad] weights); b is [Z0, Z1, Z2, K, N] or a
    ConvInput (then N counts every output pixel of every image)."""

    a: View
    b: View | ConvInput
    dest: View
    zshape: tuple[int, int, int]
    M: int
    N: int
    K: int
    tensor_cores: bool
    bias_array: np.ndarray | None = None  # per column, or per row (a conv's output channels)
    bias_rows: bool = False
    addend: View | None = None
    scale: View | None = None  # [Z0, M]: multiplies the addend (per image and channel)
    alpha: float = 1.0
    beta: float = 1.0
    act: str = "none"
    padded_a: bool = False  # A rows are zero-padded past K to a multiple of 4

    # ---- output frames -------------------------------------------------------------------
    def frame(self, v: View) -> tuple[int, list[int]] | None:
        """(offset, [s0, s1, s2, s_row, s_col]) of a view in output coordinates."""
        if isinstance(self.b, ConvInput):
            if not v.affine:
                return None
            s = list(v.strides)
            if len(s) == 3:  # 1-D conv: [N, C, W]
                s = [s[0], s[1], s[2] * self.b.OW, s[2]]
            if self.b.OH > 1 and s[2] != s[3] * self.b.OW:
                return None
            return v.offset, [s[0], self.M * s[1], 0, s[1], s[3]]
        w = V.reshape(v, self.zshape + (self.M, self.N))
        return _affine(w) if w is not None else None

    # ---- patches ------------------------------------------------------------------------
    def with_act(self, act):
        return dataclasses.replace(self, act=act) if self.act == "none" else None

    def with_scale(self, scale):
        """The result times a constant: alpha, beta and the bias scale with it."""
        if self.act != "none":
            return None
        bias = None if self.bias_array is None else self.bias_array * np.float32(scale)
        return dataclasses.replace(self, alpha=self.alpha * scale, beta=self.beta * scale,
                                   bias_array=bias)

    def with_addend(self, addend, scale=None):
        if self.act != "none" or self.addend is not None or self.frame(addend) is None:
            return None
        if scale is not None and (not isinstance(self.b, ConvInput) or self.b.groups != 1):
            return None
        return dataclasses.replace(self, addend=addend, scale=scale, beta=1.0)

    def with_destination(self, dest):
        return dataclasses.replace(self, dest=dest) if self.frame(dest) is not None else None

    # ---- emission -----------------------------------------------------------------------
    def launches(self, b: ProgramBuilder):
        conv = isinstance(self.b, ConvInput)
        M, N, K = self.M, self.N, self.K
        zblocks = prod(self.zshape)
        args = {name: 0 for name in G.PARAM_NAMES}
        args.update(M=M, N=N, K=K, Z0=self.zshape[0], Z1=self.zshape[1], Z2=self.zshape[2],
                    alpha=float(self.alpha), beta=float(self.beta))
        # A
        if self.a.affine:
            ao, (a0, a1, a2, ar, ac) = self.a.offset, list(self.a.strides)
            rows = None
        else:  # a row table over M (the batch folded into it)
            flat = V.expand(self.a, 4)
            ao, (a0, a1, a2, ar, ac) = 0, [0, 0, 0, 0, flat.strides[0]]
            rows = flat.table.reshape(-1)
        amode = "s"
        if rows is not None:
            amode = "t4"
        elif ac == 1 and (K % 4 == 0 or self.padded_a) and _aligned(ao, [a0, a1, a2, ar]):
            amode = "k4"
        elif ar == 1 and M % 4 == 0 and _aligned(ao, [a0, a1, a2, ac]):
            amode = "m4"
        args.update(A=self.a.base, Ao=ao, A0=a0, A1=a1, A2=a2, Ar=ar, Ac=ac,
                    rowsA=b.table(rows) if rows is not None else b.dummy("int32"))
        # B
        if conv:
            x = self.b
            cg = K // x.geom.taps
            bmode = "conv"
            args.update(B=x.x, B0=x.x.shape[1] * x.H * x.W, B1=cg * x.H * x.W,
                        cH=x.H, cW=x.W, cOW=x.OW, cP=x.OH * x.OW)
            args["cOWm"], args["cOWh"] = fastdiv(x.OW)
            args["cPm"], args["cPh"] = fastdiv(x.OH * x.OW)
            bdtype = x.x.dtype
        else:
            bo, (b0, b1, b2, br, bc) = self.b.offset, list(self.b.strides)
            bmode = "s"
            if bc == 1 and N % 4 == 0 and _aligned(bo, [b0, b1, b2, br]):
                bmode = "n4"
            elif br == 1 and K % 4 == 0 and _aligned(bo, [b0, b1, b2, bc]):
                bmode = "k4"
            args.update(B=self.b.base, Bo=bo, B0=b0, B1=b1, B2=b2, Br=br, Bc=bc)
            bdtype = self.b.dtype
        # epilogue operands
        yo, ys = self.frame(self.dest)
        args.update(Y=self.dest.base, Yo=yo, Y0=ys[0], Y1=ys[1], Y2=ys[2], Yr=ys[3], Yc=ys[4])
        cdtype = sdtype = biasdtype = b.dtype
        if self.addend is not None:
            co, cs = self.frame(self.addend)
            args.update(C=self.addend.base, Co=co, C0=cs[0], C1=cs[1], C2=cs[2], Cr=cs[3],
                        Cc=cs[4])
            cdtype = self.addend.dtype
        scale = self.scale if self.scale is not None else (
            x.scale if conv and x.scale is not None else None)
        if scale is not None:
            args.update(S=scale.base, So=scale.offset, S0=scale.strides[0], Sr=scale.strides[1])
            sdtype = scale.dtype
        bias = None
        if self.bias_array is not None:
            bias = b.weight(self.bias_array)
            args["bias"] = bias
            biasdtype = bias.dtype
        for name, dtype in (("bias", biasdtype), ("C", cdtype), ("S", sdtype)):
            if not isinstance(args[name], Tensor):
                args[name] = b.dummy(dtype)
        unit = N if not conv else x.OH * x.OW
        yvec = ys[4] == 1 and unit % 4 == 0 and _aligned(yo, ys[:4])
        bm, bn, splits, kchunk = choose_tile(M, N, K, zblocks, self.tensor_cores)
        args["kchunk"] = kchunk
        dtypes = (self.a.dtype, bdtype, biasdtype, cdtype, sdtype, self.dest.dtype)
        spec = G.GemmSpec(bm, bn, amode, bmode, x.geom if conv else None,
                          bias=("m" if conv or self.bias_rows else "n") if bias is not None else "",
                          addend=self.addend is not None, scaled=self.scale is not None,
                          bscale=conv and x.scale is not None, act=self.act,
                          y="v" if yvec else "s", dtypes=dtypes)
        main = mma.gemm if self.tensor_cores else G.gemm
        grid = (math.ceil(N / bn), math.ceil(M / bm), zblocks * splits)
        if splits == 1:
            return [make_launch(main(spec), grid, (G.THREADS, 1, 1),
                                [args[n] for n in G.PARAM_NAMES], [self.dest.base])]
        work = b.tensor((splits * zblocks * M * N,), dtype=G.SPLIT_WORKSPACE)
        part = dataclasses.replace(spec, bias="", addend=False, scaled=False, act="none",
                                   y="v" if N % 4 == 0 else "s", split=True,
                                   dtypes=dtypes[:5] + (G.SPLIT_WORKSPACE,))
        first = dict(args, Y=work)
        total = dataclasses.replace(spec, bm=16, bn=16, a="s", b="conv" if conv else "s",
                                    bscale=False, dtypes=(G.SPLIT_WORKSPACE,) + dtypes[1:])
        second = dict(args, A=work)
        reduce_grid = (min(math.ceil(M * N / 256), 4096), zblocks, 1)
        return [make_launch(main(part, splits), grid, (G.THREADS, 1, 1),
                            [first[n] for n in G.PARAM_NAMES], [work]),
                make_launch(G.splitk_reduce(total, splits), reduce_grid, (256, 1, 1),
                            [second[n] for n in G.PARAM_NAMES], [self.dest.base])]


def conv_weights(w: np.ndarray, groups: int) -> tuple[np.ndarray, int]:
    """[Cout, cg, kh, kw] -> [groups, og, Kpad] rows zero-padded to a multiple of 4 (so A is
    always read 4-wide), and the real K."""
    cout = w.shape[0]
    k = int(np.prod(w.shape[1:]))
    kpad = -(-k // 4) * 4
    rows = np.zeros((cout, kpad), np.float32)
    rows[:, :k] = w.reshape(cout, k)
    return rows.reshape(groups, cout // groups, kpad), k
