"""A small ONNX graph builder for the zoo: unique names, seeded weights, opset 17.

Weights are drawn from one seeded generator with He-style scales so activations stay finite and
non-trivial through the depth of every zoo model (the models are for testing numerics and speed,
not accuracy).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class GraphBuilder:
    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}_{self._count}"

    def const(self, value, prefix: str = "c", dtype=np.float32) -> str:
        name = self.fresh(prefix)
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def ints(self, values, prefix: str = "shape") -> str:
        return self.const(np.asarray(values, dtype=np.int64), prefix, np.int64)

    def op(self, op_type: str, inputs: list[str], n_outputs: int = 1, **attrs):
        outs = [self.fresh(op_type.lower()) for _ in range(n_outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.fresh("n_" + op_type), **attrs))
        return outs[0] if n_outputs == 1 else outs

    # --- parameterised layers -------------------------------------------------------------------
    def normal(self, shape, std: float) -> np.ndarray:
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
             dilation: int = 1, bias: bool = False, dims: int = 2, pad: int | None = None) -> str:
        ks = (k,) * dims
        fan_in = cin // groups * k**dims
        w = self.const(self.normal((cout, cin // groups) + ks, np.sqrt(2.0 / fan_in)), "w")
        inputs = [x, w]
        if bias:
            inputs.append(self.const(self.normal((cout,), 0.05), "b"))
        p = dilation * (k - 1) // 2 if pad is None else pad
        return self.op("Conv", inputs, kernel_shape=list(ks), strides=[stride] * dims,
                       pads=[p] * (2 * dims), group=groups, dilations=[dilation] * dims)

    def batchnorm(self, x: str, c: int) -> str:
        gamma = self.const(self.rng.uniform(0.6, 1.0, c), "bn_g")
        beta = self.const(self.normal((c,), 0.05), "bn_b")
        mean = self.const(self.normal((c,), 0.05), "bn_m")
        var = self.const(self.rng.uniform(0.7, 1.3, c), "bn_v")
        return self.op("BatchNormalization", [x, gamma, beta, mean, var], epsilon=1e-5)

    def act(self, x: str, kind: str | None) -> str:
        if kind is None:
            return x
        if kind == "relu":
            return self.op("Relu", [x])
        if kind == "hardswish":
            return self.op("HardSwish", [x])
        if kind == "hardsigmoid":
            return self.op("HardSigmoid", [x], alpha=1.0 / 6.0, beta=0.5)
        if kind == "sigmoid":
            return self.op("Sigmoid", [x])
        if kind == "swish":
            return self.op("Mul", [x, self.op("Sigmoid", [x])])
        if kind == "gelu":
            # exact GELU through Erf, in the node order torch.onnx writes for opset < 20
            erf = self.op("Erf", [self.op("Div", [x, self.const(np.sqrt(2.0))])])
            y = self.op("Mul", [x, self.op("Add", [erf, self.const(1.0)])])
            return self.op("Mul", [y, self.const(0.5)])
        raise ValueError(f"unknown activation {kind}")

    def conv_bn_act(self, x: str, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
                    act: str | None = None, dims: int = 2, dilation: int = 1) -> str:
        y = self.conv(x, cin, cout, k, stride, groups, dilation=dilation, dims=dims)
        return self.act(self.batchnorm(y, cout), act)

    def linear(self, x: str, cin: int, cout: int, gemm: bool = False) -> str:
        """A dense layer: Gemm for 2-D inputs, MatMul+Add (as exporters write it) otherwise."""
        std = np.sqrt(2.0 / cin)
        b = self.const(self.normal((cout,), 0.02), "b")
        if gemm:
            w = self.const(self.normal((cout, cin), std), "w")
            return self.op("Gemm", [x, w, b], transB=1)
        w = self.const(self.normal((cin, cout), std), "w")
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def layernorm(self, x: str, c: int) -> str:
        gamma = self.const(self.rng.uniform(0.8, 1.2, c), "ln_g")
        beta = self.const(self.normal((c,), 0.02), "ln_b")
        return self.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)

    # --- the model ------------------------------------------------------------------------------
    def model(self, name: str, inputs: list[tuple[str, list]], outputs: list[tuple[str, str, list]],
              ) -> onnx.ModelProto:
        """inputs: (name, dims); outputs: (tensor in graph, public name, dims). Dims may be strings."""
        for src, public, _ in outputs:
            self.nodes.append(helper.make_node("Identity", [src], [public], name=self.fresh("n_out")))
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in inputs],
            [helper.make_tensor_value_info(p, TensorProto.FLOAT, d) for _, p, d in outputs],
            self.initializers,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="atoll-zoo")
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model
