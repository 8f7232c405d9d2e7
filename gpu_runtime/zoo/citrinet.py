"""CitriNet-256, scaled down: 1-D time-channel separable conv blocks with squeeze-excitation.

Input "features" [N, 80, T]; prolog conv k5; 3 stages x 3 blocks (the first of each stage with
stride 2, so 8x subsampling), each block 3 sub-blocks of depthwise conv + pointwise conv + BN (+ReLU
between), SE on the last, a 1x1 residual projection; epilog conv k41 to 640 channels; CTC decoder
1x1 conv to the vocabulary; output "log_probs" [N, ceil(T/8), vocab].
(NeMo's CitriNet-256 has 21 blocks of 5 sub-blocks; this keeps its structure at a CPU-testable size.)
"""

from __future__ import annotations

import onnx

from gpu_runtime.zoo.builder import GraphBuilder

STAGE_KERNELS = ((11, 13, 15), (17, 19, 21), (23, 25, 27))


def _se(g: GraphBuilder, x: str, c: int, reduction: int = 8) -> str:
    s = g.op("ReduceMean", [x], axes=[2], keepdims=1)  # [N, C, 1]
    s = g.act(g.conv(s, c, c // reduction, 1, dims=1), "relu")
    s = g.act(g.conv(s, c // reduction, c, 1, dims=1), "sigmoid")
    return g.op("Mul", [x, s])


def _block(g: GraphBuilder, x: str, c: int, kernel: int, stride: int, repeat: int) -> str:
    h = x
    for r in range(repeat):
        h = g.conv(h, c, c, kernel, stride=stride if r == 0 else 1, groups=c, dims=1)
        h = g.conv_bn_act(h, c, c, 1, act="relu" if r < repeat - 1 else None, dims=1)
    h = _se(g, h, c)
    res = g.conv_bn_act(x, c, c, 1, stride=stride, dims=1)
    return g.act(g.op("Add", [h, res]), "relu")


def build(seed: int = 0, channels: int = 256, repeat: int = 3, vocab: int = 256,
          mels: int = 80) -> onnx.ModelProto:
    g = GraphBuilder(seed)
    x = g.conv_bn_act("features", mels, channels, 5, act="relu", dims=1)
    for kernels in STAGE_KERNELS:
        for i, k in enumerate(kernels):
            x = _block(g, x, channels, k, 2 if i == 0 else 1, repeat)
    x = g.conv_bn_act(x, channels, 640, 41, act="relu", dims=1)
    logits = g.conv(x, 640, vocab, 1, bias=True, dims=1)  # [N, vocab, T']
    log_probs = g.op("LogSoftmax", [g.op("Transpose", [logits], perm=[0, 2, 1])], axis=-1)
    return g.model("citrinet", [("features", ["N", mels, "T"])],
                   [(log_probs, "log_probs", ["N", "T_out", vocab])])
