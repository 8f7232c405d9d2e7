"""SerialEngine: RT batches on a lane of their own beside the BE batch running (onnxruntime), or
before every queued BE batch (kernel programs, not reentrant); BE batches in order at a lowered OS
priority; results equal onnxruntime run directly (the reference)."""

from __future__ import annotations

import dataclasses
import os
import threading

import numpy as np
import onnxruntime
import pytest

from gpu_runtime import executors
from gpu_runtime.priority import BE_NICE, Priority
from gpu_runtime.vgpu.discovery import discover_vgpus
from gpu_runtime.vgpu.serial_engine import SerialEngine
from tests.gpu_runtime.chain_model import matmul_chain

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    return matmul_chain(tmp_path_factory.mktemp("serial") / "slow.onnx", np.random.default_rng(5))


def one_core():
    """A CPU vGPU of one core: one BE thread, whatever this machine has."""
    return dataclasses.replace(discover_vgpus("cpu", cpu_vgpus=1)[0], threads=1)


def reference(path, x):
    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def recorder():
    order, lock = [], threading.Lock()

    def record(tag):
        def done(_):
            with lock:
                order.append(tag)
        return done

    return order, record


class Held:
    """A model's executor whose batches (those `held(inputs)` picks; all by default) start, say so on
    `started`, and wait for `go` before they run: a lane kept busy for as long as a test likes."""

    def __init__(self, runner, held=lambda inputs: True):
        self.runner, self.held = runner, held
        self.started, self.go = threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self.runner, name)

    def run(self, inputs):
        if self.held(inputs):
            self.started.set()
            assert self.go.wait(30), "never let go"
        return self.runner.run(inputs)


def load_wrapped(engine, monkeypatch, model, path, executor, max_batch, wrap):
    """Load `model` with its executor wrapped by `wrap` (a test double), through the executor
    loader the engine calls; returns (what load described, the double)."""
    real, made = executors.loader, []

    def loader(name):
        load = real(name)
        return lambda *args: made.append(wrap(load(*args))) or made[-1]

    with monkeypatch.context() as patch:
        patch.setattr(executors, "loader", loader)
        described = engine.load(model, path, executor, max_batch)
    return described, made[0]


def hold_lane(engine, monkeypatch, slow, priority) -> Held:
    """Occupy `priority`'s lane (one of its threads) with a batch of a model that waits."""
    _, held = load_wrapped(engine, monkeypatch, "held", slow, "onnxruntime", None, Held)
    engine.run("held", {"x": np.zeros((1, 768), np.float32)}, priority)
    assert held.started.wait(30)
    return held


def test_rt_batch_runs_beside_the_running_be_batch(slow, monkeypatch):
    """The BE batch is running (held) until the RT batch's result is out: the RT lane must not
    wait for it (else the BE batch is let go after 30 s, and the order says so)."""
    engine = SerialEngine(discover_vgpus("cpu", cpu_vgpus=1)[0])
    try:
        described, held = load_wrapped(engine, monkeypatch, "slow", slow, "onnxruntime", None,
                                       lambda runner: Held(runner, lambda inputs: len(inputs["x"]) > 2))
        assert described["scheduler"] == "serial" and described["batch_sizes"] == []
        rng = np.random.default_rng(6)
        be = rng.standard_normal((64, 768)).astype(np.float32)
        rt = rng.standard_normal((2, 768)).astype(np.float32)
        order, record = recorder()
        be_future = engine.run("slow", {"x": be}, Priority.BE)
        be_future.add_done_callback(record("be"))
        assert held.started.wait(30)
        rt_future = engine.run("slow", {"x": rt}, "rt")
        rt_future.add_done_callback(record("rt"))
        rt_future.add_done_callback(lambda _: held.go.set())
        rt_out, seconds = rt_future.result(60)
        np.testing.assert_allclose(rt_out["h24"], reference(slow, rt), rtol=1e-5, atol=1e-5)
        assert seconds > 0
        np.testing.assert_allclose(be_future.result(60)[0]["h24"], reference(slow, be), rtol=1e-4, atol=1e-4)
        assert order == ["rt", "be"]
    finally:
        engine.close()


def test_kernel_programs_run_rt_before_queued_be_batches(slow, monkeypatch):
    engine = SerialEngine(one_core())
    try:
        assert engine.load("slow", slow, "numpy", 4)["batch_sizes"] == [1, 2, 4]
        rng = np.random.default_rng(7)
        held = hold_lane(engine, monkeypatch, slow, "be")  # the batches below queue behind it
        order, record = recorder()
        inputs = {tag: rng.standard_normal((n, 768)).astype(np.float32)
                  for tag, n in (("be1", 4), ("be2", 4), ("rt", 2))}  # fmt: skip
        futures = {}
        for tag in ("be1", "be2", "rt"):
            futures[tag] = engine.run("slow", {"x": inputs[tag]}, "rt" if tag == "rt" else "be")
            futures[tag].add_done_callback(record(tag))
        futures["rt"].result(60)
        held.go.set()
        for tag, future in futures.items():
            np.testing.assert_allclose(future.result(60)[0]["h24"], reference(slow, inputs[tag]),
                                       rtol=1e-4, atol=1e-5)  # fmt: skip
        assert order == ["rt", "be1", "be2"]
    finally:
        engine.close()


def test_a_cpu_vgpu_runs_a_be_batch_per_core(slow, monkeypatch):
    """Two cores: a second BE batch runs while the first is held, each session on one thread."""
    info = dataclasses.replace(discover_vgpus("cpu", cpu_vgpus=1)[0], threads=2)
    engine = SerialEngine(info)
    held = None
    try:
        engine.load("slow", slow, "onnxruntime", None)
        assert engine.models["slow"].take().session.get_session_options().intra_op_num_threads == 1
        held = hold_lane(engine, monkeypatch, slow, "be")
        x = np.random.default_rng(8).standard_normal((3, 768)).astype(np.float32)
        out, _ = engine.run("slow", {"x": x}, "be").result(60)  # would wait for the held one on one core
        np.testing.assert_allclose(out["h24"], reference(slow, x), rtol=1e-5, atol=1e-5)
    finally:
        if held is not None:
            held.go.set()
        engine.close()


class NiceProbe:
    def __init__(self, runner):
        self.describe = runner.describe

    def run(self, inputs):
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_be_lane_runs_at_a_lower_os_priority(slow, monkeypatch):
    if not hasattr(os, "getpriority"):
        pytest.skip("no per-thread priorities here")
    engine = SerialEngine(discover_vgpus("cpu", cpu_vgpus=1)[0])
    try:
        load_wrapped(engine, monkeypatch, "probe", slow, "onnxruntime", None, NiceProbe)
        rt, be = (engine.run("probe", {}, p).result(10)[0] for p in (Priority.RT, Priority.BE))
        assert be == min(19, rt + BE_NICE)
    finally:
        engine.close()


def test_errors_and_close(slow, monkeypatch):
    """close() fails the queued batch at once (before the running one ends) and refuses new ones."""
    engine = SerialEngine(one_core())
    with pytest.raises(KeyError, match="not loaded"):
        engine.run("nope", {}, "be").result(10)
    with pytest.raises(ValueError, match="priority"):
        engine.run("nope", {}, "urgent")
    held = hold_lane(engine, monkeypatch, slow, "be")
    queued = engine.run("nope", {}, "be")
    closer = threading.Thread(target=engine.close)
    closer.start()
    assert isinstance(queued.exception(10), RuntimeError) and "stopped" in str(queued.exception())
    held.go.set()
    closer.join(10)
    with pytest.raises(RuntimeError, match="closed"):
        engine.run("nope", {}, "be")
