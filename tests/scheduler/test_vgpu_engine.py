"""REEF inside the vGPU workers (scheduler.vgpu_engine) through the real WorkerPool on a CPU vGPU
(batches of rows in slot arenas, `tests/gpu_runtime/row_runs.py`):
an RT batch preempts a running BE batch under `reset`/`reef` and waits for it under `seq`; results
equal onnxruntime (the reference), and a preempted BE batch equals the same batch run alone bit for
bit."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from gpu_runtime.vgpu.discovery import discover_vgpus
from gpu_runtime.vgpu.pool import WorkerPool, WorkerError
from scheduler.vgpu_engine import ReefEngine, engine_for
from tests.gpu_runtime.chain_model import matmul_chain
from tests.gpu_runtime.row_runs import RowModel
from tests.scheduler.held_engine import HeldReefEngine

pytestmark = pytest.mark.timeout(180)
SLOW = RowModel({"x": ((768,), np.float32)}, {"h24": ((768,), np.float32)})


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    return matmul_chain(tmp_path_factory.mktemp("reef_engine") / "slow.onnx", np.random.default_rng(7))


def reference(path, x):
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("policy", ["reset", "reef", "seq"])
def test_rt_batch_and_a_running_be_batch(slow, policy, tmp_path):
    """The RT batch reaches the scheduler while the BE batch's first kernel runs (HeldReefEngine
    orders the two in the worker): reset and reef answer it first, seq only after the BE batch."""
    model = shutil.copy(slow, tmp_path / "slow.onnx")
    rng = np.random.default_rng(8)
    be = rng.standard_normal((2048, 768)).astype(np.float32)
    rt = rng.standard_normal((1, 768)).astype(np.float32)
    engine = functools.partial(HeldReefEngine, policy=policy)
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1), executor="numpy", engine=engine) as pool, \
            SLOW.rows(pool, "slow", capacity=2 * len(be) + 1) as rows:  # fmt: skip
        described = SLOW.load(pool, "slow", model, max_batch=2)
        assert described["cpu0"] == {"executor": "numpy", "preemptible": True, "scheduler": policy,
                                     "batch_sizes": [1, 2], "out_row_bytes": 768 * 4}
        alone = rows.submit("cpu0", {"x": be}).result(60)["h24"]  # also plans that shape
        Path(model).with_suffix(".hold").touch()
        answered = []
        be_future = rows.submit("cpu0", {"x": be})
        be_future.add_done_callback(lambda _: answered.append("be"))
        rt_future = rows.submit("cpu0", {"x": rt}, priority="rt")
        rt_future.add_done_callback(lambda _: answered.append("rt"))
        rt_out = rt_future.result(60)["h24"]
        preempted = be_future.result(60)["h24"]
    np.testing.assert_allclose(rt_out, reference(slow, rt), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(alone, reference(slow, be), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(preempted, alone)  # kernels are idempotent: restore is exact
    # seq never preempts: the RT batch waits for the whole BE batch; reset and reef do not.
    assert answered == (["be", "rt"] if policy == "seq" else ["rt", "be"])


def test_onnxruntime_models_run_beside_the_scheduler(slow):
    x = np.random.default_rng(9).standard_normal((3, 768)).astype(np.float32)
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1), engine=engine_for("reset")) as pool, \
            SLOW.rows(pool, "slow") as rows:  # fmt: skip
        assert SLOW.load(pool, "slow", slow)["cpu0"]["scheduler"] == "serial"
        for priority in ("be", "rt"):
            out = rows.submit("cpu0", {"x": x}, priority=priority).result(60)["h24"]
            np.testing.assert_allclose(out, reference(slow, x), rtol=1e-5, atol=1e-5)


def test_unknown_policy_stops_the_worker_with_the_choices(slow):
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1), engine=engine_for("fastest")) as pool:
        with pytest.raises(WorkerError, match="unknown policy 'fastest'; choose from seq"):
            pool.load_model("slow", slow)


def test_one_vgpu_schedules_one_kind_of_program(slow):
    engine = ReefEngine(discover_vgpus("cpu", cpu_vgpus=1)[0])
    try:
        engine.load("slow", slow, "numpy", 1)
        with pytest.raises(ValueError, match="cannot mix them with cupy"):
            engine.load("slow_gpu", slow, "cupy", 1)
        with pytest.raises(KeyError, match="not loaded"):
            engine.run("other", {"x": np.zeros((1, 768), np.float32)}, "be")
        with pytest.raises(KeyError, match="missing model inputs: x"):
            engine.run("slow", {}, "be")
    finally:
        engine.close()


@pytest.mark.gpu
@pytest.mark.parametrize("policy", ["reset", "reef"])
def test_cupy_worker_schedules_rt_and_be_batches(slow, policy):
    """The same through a CUDA worker (`discover("gpu")`): outputs against onnxruntime, and a BE
    batch that an RT batch may have preempted equal to the same batch run alone, bit for bit."""
    rng = np.random.default_rng(10)
    be = rng.standard_normal((8192, 768)).astype(np.float32)
    rt = rng.standard_normal((1, 768)).astype(np.float32)
    with WorkerPool(discover_vgpus("gpu")[:1], executor="cupy", engine=engine_for(policy)) as pool, \
            SLOW.rows(pool, "slow", capacity=3 * 8192) as rows:  # fmt: skip
        vgpu = next(iter(pool.workers))
        assert SLOW.load(pool, "slow", slow, max_batch=2)[vgpu]["scheduler"] == policy
        alone = rows.submit(vgpu, {"x": be}).result(120)["h24"]
        be_future = rows.submit(vgpu, {"x": be})
        rt_out = rows.submit(vgpu, {"x": rt}, priority="rt").result(120)["h24"]
        preempted = be_future.result(120)["h24"]
    np.testing.assert_allclose(rt_out, reference(slow, rt), rtol=1e-3, atol=1e-4)
    np.testing.assert_array_equal(preempted, alone)
