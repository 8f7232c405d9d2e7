"""SqueezeNet 1.1 (torchvision's layout: 8 Fire modules, ceil-mode max pools, conv classifier)."""

from __future__ import annotations

import onnx

from gpu_runtime.zoo.builder import GraphBuilder

# (squeeze, expand) per Fire module; None marks a 3x3/2 ceil-mode max pool
LAYOUT = [None, (16, 64), (16, 64), None, (32, 128), (32, 128), None,
          (48, 192), (48, 192), (64, 256), (64, 256)]


def _fire(g: GraphBuilder, x: str, cin: int, squeeze: int, expand: int) -> str:
    s = g.act(g.conv(x, cin, squeeze, 1, bias=True), "relu")
    e1 = g.act(g.conv(s, squeeze, expand, 1, bias=True), "relu")
    e3 = g.act(g.conv(s, squeeze, expand, 3, bias=True), "relu")
    return g.op("Concat", [e1, e3], axis=1)


def build(seed: int = 0, num_classes: int = 1000) -> onnx.ModelProto:
    g = GraphBuilder(seed)
    x = g.act(g.conv("input", 3, 64, 3, stride=2, bias=True, pad=0), "relu")
    cin = 64
    for item in LAYOUT:
        if item is None:
            x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
        else:
            x = _fire(g, x, cin, *item)
            cin = 2 * item[1]
    x = g.act(g.conv(x, cin, num_classes, 1, bias=True), "relu")
    logits = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    return g.model("squeezenet1_1", [("input", ["N", 3, 224, 224])],
                   [(logits, "logits", ["N", num_classes])])
