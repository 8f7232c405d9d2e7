"""PyTorch execution of an ONNX graph: the comparison points of `atoll bench models`.

The machine's PyTorch runs the very same ONNX model node by node with `torch` operators (what
"PyTorch eager" means for a model that exists only as ONNX); `TorchGraphModel` captures that into a
CUDA graph and replays it, as a GPU user does for low latency (fp32 without TF32, or fp16). PyTorch
is not an Atoll dependency: this module is imported only for `--compare torch|torch-graph`. Integer
tensors (shapes, indices, axes) stay on the host, so ops that read them as Python ints never
synchronise the device and the model stays capturable; one needed on the device is copied once,
before capture.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper


class UnsupportedOp(ValueError):
    pass


def _attrs(node) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _ints(t) -> list[int]:
    """Integers from a tensor input or an attribute list (opset-dependent: axes move to inputs)."""
    values = t if isinstance(t, (list, tuple)) else t.reshape(-1).tolist()
    return [int(v) for v in values]


def _conv(torch, F, x, w, b=None, *, pads=None, strides=None, dilations=None, group=1, **_):
    nd = w.dim() - 2
    pads = list(pads or [0] * 2 * nd)
    begin, end = pads[:nd], pads[nd:]
    strides = list(strides or [1] * nd)
    dilations = list(dilations or [1] * nd)
    if begin != end:  # asymmetric: pad explicitly (F.pad takes the last dimension first)
        x = F.pad(x, [p for i in reversed(range(nd)) for p in (begin[i], end[i])])
        begin = [0] * nd
    fn = F.conv1d if nd == 1 else F.conv2d
    return fn(x, w, b, stride=strides, padding=begin, dilation=dilations, groups=group)


def _maxpool(torch, F, x, *, kernel_shape, pads=None, strides=None, ceil_mode=0, **_):
    nd = len(kernel_shape)
    pads = list(pads or [0] * 2 * nd)
    if pads[:nd] != pads[nd:]:
        x = F.pad(x, [p for i in reversed(range(nd)) for p in (pads[i], pads[nd + i])], value=float("-inf"))
        pads = [0] * 2 * nd
    return F.max_pool2d(x, kernel_shape, strides or kernel_shape, pads[:nd], ceil_mode=bool(ceil_mode))


def _avgpool(torch, F, x, *, kernel_shape, pads=None, strides=None, ceil_mode=0,
             count_include_pad=0, **_):  # fmt: skip
    nd = len(kernel_shape)
    pads = list(pads or [0] * 2 * nd)
    return F.avg_pool2d(x, kernel_shape, strides or kernel_shape, pads[:nd], ceil_mode=bool(ceil_mode),
                        count_include_pad=bool(count_include_pad))  # fmt: skip


def _gemm(torch, F, a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, **_):
    y = alpha * ((a.T if transA else a) @ (b.T if transB else b))
    return y if c is None else y + beta * c


def _slice(torch, F, x, starts, ends, axes=None, steps=None, **_):
    starts, ends = _ints(starts), _ints(ends)
    axes = _ints(axes) if axes is not None else list(range(len(starts)))
    steps = _ints(steps) if steps is not None else [1] * len(starts)
    for s, e, a, st in zip(starts, ends, axes, steps):
        n = x.shape[a]
        s, e = s + n if s < 0 else s, e + n if e < 0 else e
        if st > 0:  # ONNX clamps to [0, n] going forwards, to [0, n-1] / [-1, n-1] going backwards
            s, e = max(0, min(n, s)), max(0, min(n, e))
        else:
            s, e = max(0, min(n - 1, s)), max(-1, min(n - 1, e))
        if st == 1:
            x = x.narrow(a, s, max(0, e - s))
        else:
            x = torch.index_select(x, a, torch.arange(s, e, st, device=x.device))
    return x


def _split(torch, F, x, split=None, *, axis=0, num_outputs=None, n_out=1, **_):
    sizes = _ints(split) if split is not None else None
    if sizes is None:
        parts = num_outputs or n_out
        sizes = [x.shape[axis] // parts] * parts
    return list(torch.split(x, sizes, dim=axis))


def _reduce_mean(torch, F, x, axes=None, *, keepdims=1, **_):
    if axes is None:
        return x.mean() if not keepdims else x.mean(dim=tuple(range(x.dim())), keepdim=True)
    return x.mean(dim=tuple(_ints(axes)), keepdim=bool(keepdims))


def _reshape(torch, F, x, shape, *, allowzero=0, **_):
    dims = _ints(shape)
    if not allowzero:
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims)


def _pad(torch, F, x, pads, value=None, *, mode="constant", **_):
    p = _ints(pads)
    nd = x.dim()
    torch_pads = [v for i in reversed(range(nd)) for v in (p[i], p[nd + i])]
    return F.pad(x, torch_pads, mode=mode, value=float(value.item()) if value is not None else 0.0)


OPS: dict[str, Callable] = {
    "Conv": _conv,
    "BatchNormalization": lambda torch, F, x, s, b, m, v, *, epsilon=1e-5, **_: F.batch_norm(
        x, m, v, s, b, training=False, eps=epsilon),
    "Relu": lambda torch, F, x, **_: F.relu(x),
    "Sigmoid": lambda torch, F, x, **_: torch.sigmoid(x),
    "HardSigmoid": lambda torch, F, x, *, alpha=0.2, beta=0.5, **_: torch.clamp(alpha * x + beta, 0, 1),
    "HardSwish": lambda torch, F, x, **_: F.hardswish(x),
    "Erf": lambda torch, F, x, **_: torch.erf(x),
    "Gelu": lambda torch, F, x, *, approximate="none", **_: F.gelu(x, approximate=approximate),
    "Add": lambda torch, F, a, b, **_: a + b,
    "Sub": lambda torch, F, a, b, **_: a - b,
    "Mul": lambda torch, F, a, b, **_: a * b,
    "Div": lambda torch, F, a, b, **_: a / b,
    "Equal": lambda torch, F, a, b, **_: a == b,
    "Where": lambda torch, F, c, a, b, **_: torch.where(c, a, b),
    "MatMul": lambda torch, F, a, b, **_: torch.matmul(a, b),
    "Gemm": _gemm,
    "Softmax": lambda torch, F, x, *, axis=-1, **_: torch.softmax(x, dim=axis),
    "LogSoftmax": lambda torch, F, x, *, axis=-1, **_: torch.log_softmax(x, dim=axis),
    "LayerNormalization": lambda torch, F, x, s, b=None, *, axis=-1, epsilon=1e-5, **_: F.layer_norm(
        x, x.shape[axis:], s, b, eps=epsilon),
    "MaxPool": _maxpool,
    "AveragePool": _avgpool,
    "GlobalAveragePool": lambda torch, F, x, **_: x.mean(dim=tuple(range(2, x.dim())), keepdim=True),
    "Flatten": lambda torch, F, x, *, axis=1, **_: x.reshape(int(np.prod(x.shape[:axis])), -1),
    "Identity": lambda torch, F, x, **_: x,
    "Concat": lambda torch, F, *xs, axis, **_: torch.cat(xs, dim=axis),
    "Transpose": lambda torch, F, x, *, perm=None, **_: x.permute(
        *(perm if perm is not None else reversed(range(x.dim())))),
    "Reshape": _reshape,
    "Squeeze": lambda torch, F, x, axes=None, **_: x.squeeze(tuple(_ints(axes))) if axes is not None
    else x.squeeze(),
    "Unsqueeze": lambda torch, F, x, axes, **_: x.reshape(_unsqueezed(x.shape, _ints(axes))),
    "Gather": lambda torch, F, x, i, *, axis=0, **_: torch.index_select(
        x, axis, i.reshape(-1).long()).reshape(*x.shape[:axis], *i.shape, *x.shape[axis + 1:]),
    "Slice": _slice,
    "Split": _split,
    "ReduceMean": _reduce_mean,
    "Pad": _pad,
    "Shape": lambda torch, F, x, **_: torch.tensor(list(x.shape), dtype=torch.int64),  # on the host
}


def _unsqueezed(shape, axes: list[int]) -> list[int]:
    out = list(shape)
    rank = len(out) + len(axes)
    for a in sorted(a + rank if a < 0 else a for a in axes):
        out.insert(a, 1)
    return out


# Ops that read their integer inputs as Python ints: those stay on the host even beside device data.
HOST_ARGS = {"Reshape", "Slice", "Unsqueeze", "Squeeze", "Split", "Pad", "ReduceMean"}


class TorchEagerModel:
    """An ONNX model run op by op with PyTorch on `device` ("cuda" or "cpu"), in `dtype`
    ("float32" with TF32 off, or "float16": float weights and inputs cast to half)."""

    def __init__(self, path: str, device: str = "cuda", dtype: str = "float32"):
        import torch  # optional: PyTorch, the GPU baseline only
        import torch.nn.functional as F  # optional: PyTorch, the GPU baseline only

        self.torch, self.F, self.device = torch, F, device
        self.dtype = {"float32": torch.float32, "float16": torch.float16}[dtype]
        # Our fp32 kernels compute in true fp32; TF32 (PyTorch's default for convolutions) would
        # compare a less precise computation.
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        model = onnx.load(path)
        self.graph = model.graph
        unknown = sorted({n.op_type for n in self.graph.node} - set(OPS) - {"Constant"})
        if unknown:
            raise UnsupportedOp(f"no PyTorch mapping for ops: {', '.join(unknown)}")
        arrays = {init.name: numpy_helper.to_array(init) for init in self.graph.initializer}
        self.nodes = []
        for node in self.graph.node:
            if node.op_type == "Constant":
                arrays[node.output[0]] = numpy_helper.to_array(_attrs(node)["value"])
            else:
                self.nodes.append((node, _attrs(node)))
        self.constants = {name: self._tensor(a) for name, a in arrays.items()}
        self._on_device: dict[int, Any] = {}  # id(host tensor) -> its device copy
        self.outputs = [o.name for o in self.graph.output]
        self.inputs = [i.name for i in self.graph.input if i.name not in arrays]

    def _tensor(self, a: np.ndarray):
        t = self.torch.from_numpy(np.ascontiguousarray(a).copy())
        if t.is_floating_point():
            return t.to(self.device, self.dtype)
        return t  # integers stay on the host

    def _device_copy(self, t):
        copy = self._on_device.get(id(t))
        if copy is None or copy[0] is not t:
            copy = self._on_device[id(t)] = (t, t.to(self.device))
        return copy[1]

    def forward(self, tensors: dict[str, Any]) -> dict[str, Any]:
        """Runs the graph on device tensors (already in `dtype`) and returns the outputs."""
        torch, F = self.torch, self.F
        values = dict(self.constants)
        values.update(tensors)
        with torch.inference_mode():
            for node, attrs in self.nodes:
                args = [values[name] if name else None for name in node.input]
                while args and args[-1] is None:
                    args.pop()
                if node.op_type not in HOST_ARGS and any(
                        a is not None and a.device.type != "cpu" for a in args):
                    args = [self._device_copy(a) if a is not None and a.device.type == "cpu" else a
                            for a in args]
                extra = {"n_out": len(node.output)} if node.op_type == "Split" else {}
                out = OPS[node.op_type](torch, F, *args, **attrs, **extra)
                for name, value in zip(node.output, out if isinstance(out, list) else [out]):
                    values[name] = value
        return {name: values[name] for name in self.outputs}

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, Any]:
        return self.forward({k: self._tensor(v) for k, v in inputs.items()})

    def synchronize(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()


class TorchGraphModel:
    """`TorchEagerModel` captured once into a CUDA graph for fixed input shapes and replayed:
    inputs are copied into the captured input tensors, outputs read from the captured ones."""

    def __init__(self, path: str, inputs: dict[str, np.ndarray], dtype: str = "float32",
                 warmup: int = 3):
        self.eager = TorchEagerModel(path, "cuda", dtype)
        torch = self.torch = self.eager.torch
        self.static = {k: self.eager._tensor(v) for k, v in inputs.items()}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture stream, as PyTorch prescribes
            for _ in range(warmup):
                self.eager.forward(self.static)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self.eager.forward(self.static)

    def replay(self) -> None:
        self.graph.replay()

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, Any]:
        for k, v in inputs.items():
            self.static[k].copy_(self.torch.from_numpy(v))
        self.graph.replay()
        return self.out

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()
