"""Window kernels: depthwise convolution, max and average pooling (1-D as H = 1).

Every output plane (image, channel) is cut into TH x TW output tiles; a block stages the input
rows its tile reads into shared memory once (zero or -inf padding written there, so the inner
loop has no bounds checks), then each thread computes outputs from shared memory with the window
geometry baked in. A depthwise block can also leave the sum of its outputs for a following
squeeze-excitation (one partial per tile, summed in order by the SE kernel: no atomics).
Wide-group convolutions go through the implicit GEMM in gemm.py.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from gpu_runtime.kernels.bounds import Stretch, register, trips
from gpu_runtime.kernels.source import (
    BLOCK_REDUCE,
    CTYPES,
    act_cuda,
    act_numpy,
    itemsize,
    kernel_source,
    storage_prelude,
    tag,
)
from gpu_runtime.program import KernelDef, Launch


@dataclass(frozen=True)
class Geometry:
    """Compile-time convolution/pooling geometry: kernel, stride, padding (top/left) and
    dilation, 2-D (1-D has KH = 1). The implicit-GEMM im2col loader bakes the same in."""

    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int

    @property
    def taps(self) -> int:
        return self.kh * self.kw

    @property
    def tag(self) -> str:
        pad = "" if self.ph == self.pw == 0 else f"p{self.ph}x{self.pw}"
        dil = "" if self.dh == self.dw == 1 else f"d{self.dh}x{self.dw}"
        return f"k{self.kh}x{self.kw}s{self.sh}x{self.sw}{pad}{dil}"


@dataclass(frozen=True)
class Window(Geometry):
    """A geometry with the output tile (TH x TW) one block computes."""

    th: int
    tw: int

    @property
    def ih(self) -> int:  # input rows a tile reads
        return (self.th - 1) * self.sh + (self.kh - 1) * self.dh + 1

    @property
    def iw(self) -> int:
        return (self.tw - 1) * self.sw + (self.kw - 1) * self.dw + 1

    @property
    def tag(self) -> str:
        return f"{Geometry.tag.fget(self)}t{self.th}x{self.tw}"


def tile_for(oh: int, ow: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int,
             planes: int, sms: int = 132) -> tuple[int, int]:
    """Output tile (TH, TW): whole rows up to 64 wide, about 1024 outputs per block, fewer when
    the planes alone do not give every SM a few blocks."""
    tw = ow if ow <= 64 else 64
    th = max(1, min(oh, 1024 // tw))
    while th > 1 and planes * -(-oh // th) < 4 * sms:
        th = (th + 1) // 2
    while tw > 16 and th == 1 and planes * -(-ow // tw) < 4 * sms:
        tw //= 2
    return th, tw


def block_threads(win: Window) -> int:
    n = win.th * win.tw
    return 64 if n <= 64 else 128 if n <= 128 else 256


@functools.cache
def window(mode: str, win: Window, act: str = "none", partials: bool = False,
           dtypes: tuple[str, str] = ("float32", "float32")) -> KernelDef:
    """mode 'conv' (depthwise: w [C, KH*KW], bias [C]), 'max' or 'avg' (include_pad flag).

    Args: X [planes, H, W], W, bias, Y [planes, OH, OW], partials [planes, tiles] (any buffer
    when unused), then C (channels: plane % C picks the weights), H, W, OH, OW, tiles_h,
    tiles_w, include_pad."""
    tx, ty = dtypes
    name = (f"atoll_window_{mode}_{win.tag}" + (f"_{act}" if act != "none" else "")
            + ("_sum" if partials else "") + tag(dtypes))
    pad = "-3.402823466e38f" if mode == "max" else "0.f"
    threads = block_threads(win)
    body = f"""
  __shared__ float tile[{win.ih}][{win.iw}];
  __shared__ float buf[33];
  const int tiles = tiles_h * tiles_w;
  const int plane = blockIdx.x / tiles, t = blockIdx.x - plane * tiles;
  const int oh0 = (t / tiles_w) * {win.th}, ow0 = (t - (t / tiles_w) * tiles_w) * {win.tw};
  const int ih0 = oh0 * {win.sh} - {win.ph}, iw0 = ow0 * {win.sw} - {win.pw};
  const {CTYPES[tx]}* xp = X + (long long)plane * H * W;
  for (int e = threadIdx.x; e < {win.ih * win.iw}; e += {threads}) {{
    const int r = e / {win.iw}, c = e - r * {win.iw}, ih = ih0 + r, iw = iw0 + c;
    tile[r][c] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? atoll_ld(xp + ih * W + iw) : {pad};
  }}
  __syncthreads();
"""
    if mode == "conv":
        body += f"""  const int ch = plane % C;
  float wk[{win.kh * win.kw}];
#pragma unroll
  for (int k = 0; k < {win.kh * win.kw}; ++k) wk[k] = atoll_ld(Wt + ch * {win.kh * win.kw} + k);
  const float b = atoll_ld(bias + ch);
"""
    body += f"""  float total = 0.f;
  for (int e = threadIdx.x; e < {win.th * win.tw}; e += {threads}) {{
    const int r = e / {win.tw}, c = e - r * {win.tw}, oh = oh0 + r, ow = ow0 + c;
    if (oh >= OH || ow >= OW) continue;
    float v = {'b' if mode == 'conv' else pad};
"""
    if mode == "avg":
        body += "    int cnt = 0;\n"
    body += f"""#pragma unroll
    for (int i = 0; i < {win.kh}; ++i)
#pragma unroll
      for (int j = 0; j < {win.kw}; ++j) {{
        const float x = tile[r * {win.sh} + i * {win.dh}][c * {win.sw} + j * {win.dw}];
        {_accumulate(mode, win)}
      }}
"""
    if mode == "avg":
        body += f"    v /= (float)(include_pad ? {win.kh * win.kw} : cnt);\n"
    body += f"""    v = {act_cuda(act, 'v')};
    atoll_st(Y + ((long long)plane * OH + oh) * OW + ow, v);
    total += v;
  }}
"""
    if partials:
        body += ("  total = atoll_block_reduce(total, buf, false);\n"
                 "  if (threadIdx.x == 0) Psum[blockIdx.x] = total;\n")
    params = (f"const {CTYPES[tx]}* __restrict__ X, const {CTYPES[tx]}* __restrict__ Wt, "
              f"const {CTYPES[tx]}* __restrict__ bias, {CTYPES[ty]}* __restrict__ Y, "
              "float* __restrict__ Psum, int C, int H, int W, int OH, int OW, int tiles_h, "
              "int tiles_w, int include_pad")
    src = kernel_source(name, params, body, prelude=storage_prelude(dtypes) + BLOCK_REDUCE)

    def impl(x, w, bias, y, psum, C, H, W, OH, OW, tiles_h, tiles_w, include_pad):
        planes = y.size // (OH * OW)
        out = window_numpy(mode, win, x.reshape(planes, H, W).astype(np.float32), OH, OW,
                           w.reshape(C, -1) if mode == "conv" else None,
                           bias.reshape(-1) if mode == "conv" else None, C, include_pad)
        out = act_numpy(act, out)
        y.reshape(planes, OH, OW)[...] = out
        if partials:
            sums = np.zeros((planes, tiles_h, tiles_w), np.float32)
            for a in range(tiles_h):
                for b in range(tiles_w):
                    sums[:, a, b] = out[:, a * win.th:(a + 1) * win.th,
                                        b * win.tw:(b + 1) * win.tw].sum(axis=(1, 2))
            psum.reshape(-1)[:sums.size] = sums.reshape(-1)

    shared = 4 * (win.ih * win.iw + 33)
    register(name, functools.partial(_stretch, win, threads, itemsize(tx), itemsize(ty)))
    return KernelDef(name, src, impl, registers=32 + win.kh * win.kw // 2, shared_bytes=shared)


def _stretch(win: Window, threads: int, sx: int, sy: int, launch: Launch) -> tuple[Stretch]:
    """A block runs from its guard to its end: the input rows staged (a dependent load per
    staging step of a thread), the weights, and its outputs computed from shared memory."""
    staged, outputs = win.ih * win.iw, win.th * win.tw
    steps = trips(staged, threads)
    return (Stretch(staged * sx + win.taps * sx + outputs * sy, 2 * outputs * win.taps, steps + 1),)


def _accumulate(mode: str, win: Window) -> str:
    if mode == "conv":
        return f"v = fmaf(x, wk[i * {win.kw} + j], v);"
    if mode == "max":
        return "v = fmaxf(v, x);"
    # average: padding taps are zeros in the tile; count only the in-image ones
    return (f"v += x; {{ const int ih = ih0 + r * {win.sh} + i * {win.dh}, "
            f"iw = iw0 + c * {win.sw} + j * {win.dw}; "
            "cnt += (ih >= 0 && ih < H && iw >= 0 && iw < W); }")


def window_numpy(mode, win, x, OH, OW, w, bias, C, include_pad) -> np.ndarray:
    """Reference: the padded input as a strided window view, reduced per output."""
    planes, H, W = x.shape
    hp = max(H + win.ph, (OH - 1) * win.sh + (win.kh - 1) * win.dh + 1)
    wp = max(W + win.pw, (OW - 1) * win.sw + (win.kw - 1) * win.dw + 1)
    fill = -np.inf if mode == "max" else 0.0
    xp = np.full((planes, hp, wp), fill, np.float32)
    xp[:, win.ph:win.ph + H, win.pw:win.pw + W] = x
    s = xp.strides
    cols = np.lib.stride_tricks.as_strided(
        xp, (planes, OH, OW, win.kh, win.kw),
        (s[0], s[1] * win.sh, s[2] * win.sw, s[1] * win.dh, s[2] * win.dw))
    if mode == "max":
        return cols.max(axis=(3, 4))
    if mode == "conv":
        taps = w.reshape(C, win.kh, win.kw)[np.arange(planes) % C]
        out = np.zeros((planes, OH, OW), np.float32)
        for i in range(win.kh):
            for j in range(win.kw):
                out += cols[:, :, :, i, j] * taps[:, i, j][:, None, None]
        return out + bias[np.arange(planes) % C][:, None, None]
    total = cols.sum(axis=(3, 4))
    if include_pad:
        return total / np.float32(win.kh * win.kw)
    ones = np.zeros((hp, wp), np.float32)
    ones[win.ph:win.ph + H, win.pw:win.pw + W] = 1
    t = ones.strides
    cnt = np.lib.stride_tricks.as_strided(
        ones, (OH, OW, win.kh, win.kw),
        (t[0] * win.sh, t[1] * win.sw, t[0] * win.dh, t[1] * win.dw)).sum((2, 3))
    return total / cnt
