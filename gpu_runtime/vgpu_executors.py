"""Executor registry for vGPU workers: executor name -> loader, imported only when first used.

A loader takes (onnx_path, info, max_batch) and returns an object with `run(inputs) -> outputs`
(dicts of arrays by tensor name) and a `describe()` dict. Loaders import their backend inside the
worker process, after the vGPU's environment is set, so CUDA is never touched before that.
"""

from __future__ import annotations

import importlib

# executor -> "module:loader"
EXECUTORS: dict[str, str] = {
    "onnxruntime": "gpu_runtime.vgpu_executors:load_onnxruntime",
}


class UnknownExecutor(ValueError):
    pass


def loader(executor: str):
    try:
        module, attr = EXECUTORS[executor].split(":")
    except KeyError:
        raise UnknownExecutor(
            f"unknown executor {executor!r}; available: {', '.join(sorted(EXECUTORS))}"
        ) from None
    return getattr(importlib.import_module(module), attr)


def load_onnxruntime(onnx_path, info, max_batch=None):
    """Whole-graph onnxruntime; any batch size the graph accepts (`max_batch` is not needed)."""
    from gpu_runtime.ort_executor import OrtExecutor

    device = "cpu" if info.kind == "cpu" else "cuda"
    return OrtExecutor(onnx_path, intra_op_threads=info.threads, device=device)
