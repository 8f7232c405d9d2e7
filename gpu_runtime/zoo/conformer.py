"""Conformer encoder + CTC head (Conformer-S sized: 16 layers, d=144, 4 heads, conv kernel 31).

Input "features" [N, 80, T] (log-mel); 4x time subsampling by two 3x3/2 convolutions; absolute
sinusoidal positional encoding (not the paper's relative one); macaron blocks
(½FFN, MHSA, conv module with GLU + depthwise 1-D conv + BatchNorm + Swish, ½FFN, LayerNorm);
output "log_probs" [N, T', vocab] with T' = ((T - 1) // 2 - 1) // 2.
"""

from __future__ import annotations

import numpy as np
import onnx

from gpu_runtime.zoo.builder import GraphBuilder

MAX_FRAMES = 4096  # positional table length (after subsampling)


def _sinusoid(length: int, d: int) -> np.ndarray:
    pos = np.arange(length)[:, None]
    freq = np.exp(-np.log(10000.0) * np.arange(0, d, 2) / d)
    pe = np.zeros((length, d), np.float32)
    pe[:, 0::2] = np.sin(pos * freq)
    pe[:, 1::2] = np.cos(pos * freq)
    return pe


def _ffn(g: GraphBuilder, x: str, d: int) -> str:
    h = g.act(g.linear(g.layernorm(x, d), d, 4 * d), "swish")
    return g.op("Mul", [g.linear(h, 4 * d, d), g.const(0.5)])


def _mhsa(g: GraphBuilder, x: str, d: int, heads: int) -> str:
    h = g.layernorm(x, d)
    dk = d // heads

    def split_heads(t: str) -> str:  # [N, T, d] -> [N, heads, T, dk]
        return g.op("Transpose", [g.op("Reshape", [t, g.ints([0, -1, heads, dk])])], perm=[0, 2, 1, 3])

    q, k, v = (split_heads(g.linear(h, d, d)) for _ in range(3))
    scores = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
    probs = g.op("Softmax", [g.op("Div", [scores, g.const(np.sqrt(dk))])], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    return g.linear(g.op("Reshape", [ctx, g.ints([0, -1, d])]), d, d)


def _conv_module(g: GraphBuilder, x: str, d: int, kernel: int) -> str:
    h = g.op("Transpose", [g.layernorm(x, d)], perm=[0, 2, 1])  # [N, d, T]
    a, b = g.op("Split", [g.conv(h, d, 2 * d, 1, bias=True, dims=1)], 2, axis=1)
    h = g.op("Mul", [a, g.act(b, "sigmoid")])  # GLU
    h = g.conv_bn_act(h, d, d, kernel, groups=d, act="swish", dims=1)
    h = g.conv(h, d, d, 1, bias=True, dims=1)
    return g.op("Transpose", [h], perm=[0, 2, 1])


def build(seed: int = 0, layers: int = 16, d: int = 144, heads: int = 4, kernel: int = 31,
          vocab: int = 128, mels: int = 80) -> onnx.ModelProto:
    g = GraphBuilder(seed)
    x = g.op("Unsqueeze", ["features", g.ints([1])])  # [N, 1, F, T]
    x = g.act(g.conv(x, 1, d, 3, stride=2, bias=True, pad=0), "relu")
    x = g.act(g.conv(x, d, d, 3, stride=2, bias=True, pad=0), "relu")  # [N, d, F', T']
    f = ((mels - 1) // 2 - 1) // 2
    x = g.op("Transpose", [x], perm=[0, 3, 1, 2])
    x = g.linear(g.op("Reshape", [x, g.ints([0, 0, d * f])]), d * f, d)
    frames = g.op("Gather", [g.op("Shape", [x]), g.ints([1])], axis=0)
    pe = g.op("Slice", [g.const(_sinusoid(MAX_FRAMES, d), "pos_table"), g.ints([0]), frames,
                        g.ints([0])])
    x = g.op("Add", [g.op("Mul", [x, g.const(np.sqrt(d))]), pe])
    for _ in range(layers):
        x = g.op("Add", [x, _ffn(g, x, d)])
        x = g.op("Add", [x, _mhsa(g, x, d, heads)])
        x = g.op("Add", [x, _conv_module(g, x, d, kernel)])
        x = g.op("Add", [x, _ffn(g, x, d)])
        x = g.layernorm(x, d)
    log_probs = g.op("LogSoftmax", [g.linear(x, d, vocab)], axis=-1)
    return g.model("conformer", [("features", ["N", mels, "T"])],
                   [(log_probs, "log_probs", ["N", "T_out", vocab])])
