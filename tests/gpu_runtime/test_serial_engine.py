"""SerialEngine: one batch at a time, RT batches before queued BE ones, loads first; results equal
onnxruntime run directly (the reference)."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnxruntime
import pytest

from gpu_runtime.vgpu.discovery import discover_vgpus
from gpu_runtime.vgpu.serial_engine import SerialEngine
from tests.gpu_runtime.chain_model import matmul_chain

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    return matmul_chain(tmp_path_factory.mktemp("serial") / "slow.onnx", np.random.default_rng(5))


def test_rt_batch_overtakes_queued_be_batches(slow):
    engine = SerialEngine(discover_vgpus("cpu", cpu_vgpus=1)[0])
    try:
        assert engine.load("slow", slow, "onnxruntime", None)["scheduler"] == "serial"
        rng = np.random.default_rng(6)
        order, lock = [], threading.Lock()
        gate = threading.Event()

        def record(tag):
            def done(_):
                with lock:
                    order.append(tag)
            return done

        # Hold the engine's thread so the three batches below are all queued behind it.
        engine._put("load", gate.wait)
        inputs = {tag: rng.standard_normal((n, 768)).astype(np.float32)
                  for tag, n in (("be1", 64), ("be2", 64), ("rt", 4))}  # fmt: skip
        futures = {}
        for tag in ("be1", "be2", "rt"):
            futures[tag] = engine.run("slow", {"x": inputs[tag]}, "be" if tag != "rt" else "rt")
            futures[tag].add_done_callback(record(tag))
        gate.set()
        session = onnxruntime.InferenceSession(slow, providers=["CPUExecutionProvider"])
        for tag, future in futures.items():
            outputs, seconds = future.result(60)
            np.testing.assert_allclose(outputs["h24"], session.run(None, {"x": inputs[tag]})[0],
                                       rtol=1e-5, atol=1e-5)  # fmt: skip
            assert seconds > 0
        assert order == ["rt", "be1", "be2"]
    finally:
        engine.close()


def test_errors_and_close(slow):
    engine = SerialEngine(discover_vgpus("cpu", cpu_vgpus=1)[0])
    with pytest.raises(KeyError, match="not loaded"):
        engine.run("nope", {}, "be").result(10)
    with pytest.raises(ValueError, match="priority"):
        engine.run("nope", {}, "urgent")
    gate = threading.Event()
    engine._put("load", gate.wait)
    queued = engine.run("nope", {}, "be")
    closer = threading.Thread(target=engine.close)
    closer.start()
    while not engine._closed:  # close() has marked the engine before the held batch returns
        time.sleep(0.001)
    gate.set()
    closer.join(10)
    with pytest.raises(RuntimeError, match="stopped"):
        queued.result(10)
    with pytest.raises(RuntimeError, match="closed"):
        engine.run("nope", {}, "be")
