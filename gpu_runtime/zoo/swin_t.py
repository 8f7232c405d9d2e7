"""Swin-T (torchvision's layout): patch 4, window 7, depths 2-2-6-2, heads 3-6-12-24, dims 96-768.

Shifted windows are real: cyclic shifts are Slice+Concat, window (un)partitioning is
Reshape/Transpose, and both the relative position bias (Gather from a learned table) and the shift
mask (region ids compared pairwise) are computed by ONNX ops, as exporters write them.
"""

from __future__ import annotations

import numpy as np
import onnx

from gpu_runtime.zoo.builder import GraphBuilder

WINDOW = 7
DEPTHS = (2, 2, 6, 2)
HEADS = (3, 6, 12, 24)
EMBED = 96


def _roll(g: GraphBuilder, x: str, shift: int, size: int) -> str:
    """torch.roll by `shift` on axes 1 and 2 (NHWC) as exporters write it: Slice + Concat."""
    for axis in (1, 2):
        k = shift % size
        head = g.op("Slice", [x, g.ints([size - k]), g.ints([size]), g.ints([axis])])
        tail = g.op("Slice", [x, g.ints([0]), g.ints([size - k]), g.ints([axis])])
        x = g.op("Concat", [head, tail], axis=axis)
    return x


def _partition(g: GraphBuilder, x: str, size: int, c: int) -> str:
    """[B, H, W, C] -> [B * nW, 49, C]"""
    n = size // WINDOW
    x = g.op("Reshape", [x, g.ints([-1, n, WINDOW, n, WINDOW, c])])
    x = g.op("Transpose", [x], perm=[0, 1, 3, 2, 4, 5])
    return g.op("Reshape", [x, g.ints([-1, WINDOW * WINDOW, c])])


def _unpartition(g: GraphBuilder, x: str, size: int, c: int) -> str:
    n = size // WINDOW
    x = g.op("Reshape", [x, g.ints([-1, n, n, WINDOW, WINDOW, c])])
    x = g.op("Transpose", [x], perm=[0, 1, 3, 2, 4, 5])
    return g.op("Reshape", [x, g.ints([-1, size, size, c])])


def _relative_bias(g: GraphBuilder, heads: int) -> str:
    """[heads, 49, 49] gathered from a learned (2w-1)^2 x heads table."""
    coords = np.stack(np.meshgrid(np.arange(WINDOW), np.arange(WINDOW), indexing="ij")).reshape(2, -1)
    rel = coords[:, :, None] - coords[:, None, :] + WINDOW - 1
    index = (rel[0] * (2 * WINDOW - 1) + rel[1]).reshape(-1)
    table = g.const(g.rng.normal(0, 0.02, ((2 * WINDOW - 1) ** 2, heads)), "rel_table")
    bias = g.op("Gather", [table, g.const(index, "rel_index", np.int64)], axis=0)
    bias = g.op("Reshape", [bias, g.ints([WINDOW * WINDOW, WINDOW * WINDOW, heads])])
    return g.op("Transpose", [bias], perm=[2, 0, 1])


def _shift_mask(g: GraphBuilder, size: int, shift: int) -> str:
    """[1, nW, 1, 49, 49]: 0 within a region, -100 across regions of the shifted image."""
    regions = np.zeros((1, size, size, 1), np.float32)
    bounds = (slice(0, -WINDOW), slice(-WINDOW, -shift), slice(-shift, None))
    for i, hs in enumerate(bounds):
        for j, ws in enumerate(bounds):
            regions[:, hs, ws, :] = 3 * i + j
    ids = _partition(g, g.const(regions, "regions"), size, 1)  # [nW, 49, 1]
    ids = g.op("Reshape", [ids, g.ints([-1, WINDOW * WINDOW])])
    diff = g.op("Sub", [g.op("Unsqueeze", [ids, g.ints([2])]), g.op("Unsqueeze", [ids, g.ints([1])])])
    same = g.op("Equal", [diff, g.const(0.0)])
    mask = g.op("Where", [same, g.const(0.0), g.const(-100.0)])
    return g.op("Unsqueeze", [mask, g.ints([0, 2])])


def _attention(g: GraphBuilder, x: str, size: int, c: int, heads: int, shift: int) -> str:
    if shift:
        x = _roll(g, x, -shift, size)
    w = _partition(g, x, size, c)
    hd = c // heads
    qkv = g.op("Reshape", [g.linear(w, c, 3 * c), g.ints([-1, WINDOW * WINDOW, 3, heads, hd])])
    qkv = g.op("Transpose", [qkv], perm=[2, 0, 3, 1, 4])
    q, k, v = (g.op("Squeeze", [t, g.ints([0])]) for t in g.op("Split", [qkv], 3, axis=0))
    q = g.op("Mul", [q, g.const(hd ** -0.5)])
    attn = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
    attn = g.op("Add", [attn, _relative_bias(g, heads)])
    if shift:
        n_win = (size // WINDOW) ** 2
        tokens = WINDOW * WINDOW
        attn = g.op("Reshape", [attn, g.ints([-1, n_win, heads, tokens, tokens])])
        attn = g.op("Add", [attn, _shift_mask(g, size, shift)])
        attn = g.op("Reshape", [attn, g.ints([-1, heads, tokens, tokens])])
    out = g.op("MatMul", [g.op("Softmax", [attn], axis=-1), v])
    out = g.op("Reshape", [g.op("Transpose", [out], perm=[0, 2, 1, 3]), g.ints([-1, WINDOW * WINDOW, c])])
    out = _unpartition(g, g.linear(out, c, c), size, c)
    return _roll(g, out, shift, size) if shift else out


def _block(g: GraphBuilder, x: str, size: int, c: int, heads: int, shift: int) -> str:
    x = g.op("Add", [x, _attention(g, g.layernorm(x, c), size, c, heads, shift)])
    h = g.act(g.linear(g.layernorm(x, c), c, 4 * c), "gelu")
    return g.op("Add", [x, g.linear(h, 4 * c, c)])


def _merge(g: GraphBuilder, x: str, c: int) -> str:
    """PatchMerging: 2x2 neighbours concatenated (torchvision's order), LayerNorm, 4C -> 2C."""
    parts = [g.op("Slice", [x, g.ints([r, s]), g.ints([1 << 30, 1 << 30]), g.ints([1, 2]),
                            g.ints([2, 2])]) for r, s in ((0, 0), (1, 0), (0, 1), (1, 1))]
    x = g.layernorm(g.op("Concat", parts, axis=-1), 4 * c)
    w = g.const(g.normal((4 * c, 2 * c), np.sqrt(1.0 / (4 * c))), "w")
    return g.op("MatMul", [x, w])


def build(seed: int = 0, num_classes: int = 1000) -> onnx.ModelProto:
    g = GraphBuilder(seed)
    x = g.conv("input", 3, EMBED, 4, stride=4, bias=True, pad=0)
    x = g.layernorm(g.op("Transpose", [x], perm=[0, 2, 3, 1]), EMBED)
    size, c = 224 // 4, EMBED
    for stage, (depth, heads) in enumerate(zip(DEPTHS, HEADS)):
        if stage:
            x = _merge(g, x, c)
            size, c = size // 2, 2 * c
        for i in range(depth):
            shift = WINDOW // 2 if i % 2 and size > WINDOW else 0
            x = _block(g, x, size, c, heads, shift)
    x = g.op("ReduceMean", [g.layernorm(x, c)], axes=[1, 2], keepdims=0)
    logits = g.linear(x, c, num_classes, gemm=True)
    return g.model("swin_t", [("input", ["N", 3, 224, 224])], [(logits, "logits", ["N", num_classes])])
