"""Per-op lowering: ONNX node (with at least one runtime input) -> launches over buffers.

Each function takes (ctx, node, inputs, attrs) and returns the node's output values. Inputs are
Tensors (runtime) or np.ndarrays (known at import time). Anything not handled raises
UnsupportedModelError naming the attribute; the importer adds the node's name and op. One module
per op family, like `gpu_runtime.kernels`; this table is the only place an op name is mapped.
"""

from __future__ import annotations

from gpu_runtime.compiler.lowering import conv, elementwise, layout, matmul, reduce, views

LOWERINGS = {
    "Relu": elementwise.unary_op("relu"),
    "Sigmoid": elementwise.lower_sigmoid,
    "HardSigmoid": elementwise.unary_op("hardsigmoid", (0.2, 0.5)),
    "HardSwish": elementwise.unary_op("hardswish"),
    "LeakyRelu": elementwise.unary_op("leakyrelu", (0.01, 0.0)),
    "Erf": elementwise.unary_op("erf"),
    "Tanh": elementwise.unary_op("tanh"),
    "Exp": elementwise.unary_op("exp"),
    "Log": elementwise.unary_op("log"),
    "Sqrt": elementwise.unary_op("sqrt"),
    "Neg": elementwise.unary_op("neg"),
    "Abs": elementwise.unary_op("abs"),
    "Reciprocal": elementwise.unary_op("reciprocal"),
    "Gelu": elementwise.lower_gelu,
    "Clip": elementwise.lower_clip,
    "Add": elementwise.lower_add,
    "Sub": elementwise.binary_op("sub"),
    "Mul": elementwise.lower_mul,
    "Div": elementwise.lower_div,
    "Pow": elementwise.binary_op("pow"),
    "Max": elementwise.binary_op("max"),
    "Min": elementwise.binary_op("min"),
    "BatchNormalization": elementwise.lower_batchnorm,
    "Conv": conv.lower_conv,
    "Gemm": matmul.lower_gemm,
    "MatMul": matmul.lower_matmul,
    "MaxPool": lambda c, n, i, a: reduce.lower_pool(c, n, i, a, "max"),
    "AveragePool": lambda c, n, i, a: reduce.lower_pool(c, n, i, a, "avg"),
    "GlobalAveragePool": reduce.lower_global_avg_pool,
    "ReduceMean": reduce.lower_reduce_mean,
    "Softmax": reduce.lower_softmax,
    "LogSoftmax": lambda c, n, i, a: reduce.lower_softmax(c, n, i, a, log=True),
    "LayerNormalization": reduce.lower_layer_norm,
    "Transpose": layout.lower_transpose,
    "Concat": layout.lower_concat,
    "Split": layout.lower_split,
    "Slice": layout.lower_slice,
    "Gather": layout.lower_gather,
    "Pad": layout.lower_pad,
    "Expand": layout.lower_expand,
    "Reshape": views.lower_reshape,
    "Flatten": views.lower_flatten,
    "Squeeze": views.lower_squeeze,
    "Unsqueeze": views.lower_unsqueeze,
    "Identity": views.lower_identity,
    "Dropout": views.lower_identity,
    "Cast": views.lower_cast,
}
