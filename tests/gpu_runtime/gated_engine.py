"""A worker engine whose loads of models named `gated*` wait until a file exists: lets a test hold
a load open for as long as it likes, in the worker process (spawn imports this module by name)."""

from __future__ import annotations

import time
from pathlib import Path

from gpu_runtime.vgpu.serial_engine import SerialEngine


class GatedEngine(SerialEngine):
    def load(self, model, onnx_path, executor, max_batch, lengths=(), instances=None):
        gate = Path(onnx_path).with_suffix(".gate")
        while model.startswith("gated") and not gate.exists():
            time.sleep(0.01)
        return super().load(model, onnx_path, executor, max_batch, lengths, instances)
