"""REEF's engine on executors with device memory (here the CUDA emulator, cuda-emu): every program
of a model (batch sizes x lengths x priorities) shares one weight copy, each priority one arena
sized by its largest program, and batches of one priority still all come back right when they
arrive together (they take turns on their shared arena)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

from gpu_runtime.compiler.shapes import ModelShapes
from gpu_runtime.priority import Priority
from gpu_runtime.vgpu.discovery import discover_vgpus
from scheduler.vgpu_engine import ReefEngine
from tests.gpu_runtime.test_device_memory import conv1d_model

pytestmark = pytest.mark.timeout(300)


def test_one_weight_copy_and_one_arena_per_priority(tmp_path):
    path = conv1d_model(tmp_path / "m.onnx", 8)
    engine = ReefEngine(discover_vgpus("cpu", cpu_vgpus=1)[0], policy="reset")
    try:
        described = engine.load("m", path, "cuda-emu", max_batch=4, lengths=(6, 12))
        program = ModelShapes(path).program((4, 12))  # the largest shape
        weights, largest = program.weight_bytes, program.arena_bytes
        assert described["batch_sizes"] == [1, 2, 4]
        # 12 programs (3 batch sizes x 2 lengths x 2 priorities): one weight copy, two arenas
        assert described["device_memory"] == {"weights": weights, "arena": 2 * largest,
                                              "total": weights + 2 * largest}
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(3)
        inputs = [rng.standard_normal((b, 8, t)).astype(np.float32) for b, t in
                  [(4, 12), (1, 6), (2, 12), (4, 6), (1, 12)]]
        be = [engine.run("m", {"x": x}, Priority.BE) for x in inputs]
        rt = [engine.run("m", {"x": x}, Priority.RT) for x in inputs[:2]]
        for x, future in zip(inputs + inputs[:2], be + rt):
            outputs, _ = future.result(120)
            np.testing.assert_allclose(outputs["y"], session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    finally:
        engine.close()
