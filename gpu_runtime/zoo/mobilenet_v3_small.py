"""MobileNetV3-small (torchvision's layout: 11 inverted-residual blocks, SE, hardswish), 1000 classes."""

from __future__ import annotations

import onnx

from gpu_runtime.zoo.builder import GraphBuilder

# (kernel, expanded, out, use_se, activation, stride), input channels follow from the previous row
BLOCKS = [
    (3, 16, 16, True, "relu", 2),
    (3, 72, 24, False, "relu", 2),
    (3, 88, 24, False, "relu", 1),
    (5, 96, 40, True, "hardswish", 2),
    (5, 240, 40, True, "hardswish", 1),
    (5, 240, 40, True, "hardswish", 1),
    (5, 120, 48, True, "hardswish", 1),
    (5, 144, 48, True, "hardswish", 1),
    (5, 288, 96, True, "hardswish", 2),
    (5, 576, 96, True, "hardswish", 1),
    (5, 576, 96, True, "hardswish", 1),
]


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _squeeze_excite(g: GraphBuilder, x: str, c: int) -> str:
    s = _make_divisible(c // 4)
    pooled = g.op("GlobalAveragePool", [x])
    h = g.act(g.conv(pooled, c, s, 1, bias=True), "relu")
    scale = g.act(g.conv(h, s, c, 1, bias=True), "hardsigmoid")
    return g.op("Mul", [x, scale])


def build(seed: int = 0, num_classes: int = 1000) -> onnx.ModelProto:
    g = GraphBuilder(seed)
    x = g.conv_bn_act("input", 3, 16, 3, stride=2, act="hardswish")
    cin = 16
    for k, exp, cout, use_se, act, stride in BLOCKS:
        y = x
        if exp != cin:
            y = g.conv_bn_act(y, cin, exp, 1, act=act)
        y = g.conv_bn_act(y, exp, exp, k, stride=stride, groups=exp, act=act)
        if use_se:
            y = _squeeze_excite(g, y, exp)
        y = g.conv_bn_act(y, exp, cout, 1)
        x = g.op("Add", [x, y]) if stride == 1 and cin == cout else y
        cin = cout
    x = g.conv_bn_act(x, cin, 576, 1, act="hardswish")
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    x = g.act(g.linear(x, 576, 1024, gemm=True), "hardswish")
    logits = g.linear(x, 1024, num_classes, gemm=True)
    return g.model("mobilenet_v3_small", [("input", ["N", 3, 224, 224])],
                   [(logits, "logits", ["N", num_classes])])
