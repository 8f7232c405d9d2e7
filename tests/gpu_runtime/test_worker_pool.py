"""WorkerPool on CPU vGPUs, batches of rows in slot arenas as the server sends them (`row_runs`):
results equal direct onnxruntime (the reference), concurrency, errors, a worker killed with SIGKILL
mid-batch (and again and again), and no leaked processes after close."""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import selectors
import signal
import subprocess
import sys
import threading
import time
from multiprocessing import connection
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpu_runtime.vgpu.backoff import Backoff
from gpu_runtime.vgpu.discovery import VGpuInfo, discover_vgpus
from gpu_runtime.vgpu.pool import PoolClosed, WorkerPool, WorkerCrashed, WorkerError
from gpu_runtime.vgpu.worker_handle import send_loop
from tests.gpu_runtime.chain_model import matmul_chain, save
from tests.gpu_runtime.gated_engine import GatedEngine
from tests.gpu_runtime.row_runs import RowModel

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    rng = np.random.default_rng(0)
    d = tmp_path_factory.mktemp("models")
    w = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    mlp = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["y"]),
            helper.make_node("Relu", ["y"], ["relu"]),
            helper.make_node("ArgMax", ["y"], ["label"], axis=1, keepdims=0),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [
            helper.make_tensor_value_info("relu", TensorProto.FLOAT, ["N", 8]),
            helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
        ],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    # Output 64x the input: its slot's output region is sized from its dims, not the input's.
    grow = helper.make_graph(
        [helper.make_node("Tile", ["x", "reps"], ["y"])],
        "grow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1024])],
        [numpy_helper.from_array(np.array([1, 64], np.int64), "reps")],
    )
    return {
        "mlp": save(mlp, d / "mlp.onnx"),
        # Slow enough (hundreds of ms) that a SIGKILL right after submit lands mid-batch.
        "slow": matmul_chain(d / "slow.onnx", rng),
        "grow": save(grow, d / "grow.onnx"),
    }


def reference(path, inputs):
    """onnxruntime in this process, the reference for every pool result."""
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs)))


MLP = RowModel({"x": ((16,), np.float32)}, {"relu": ((8,), np.float32), "label": ((), np.int64)})
SLOW = RowModel({"x": ((768,), np.float32)}, {"h24": ((768,), np.float32)})
GROW = RowModel({"x": ((16,), np.float32)}, {"y": ((1024,), np.float32)})


@pytest.fixture(scope="module")
def pool(models):
    pool = WorkerPool(discover_vgpus("cpu", cpu_vgpus=2))
    MLP.load(pool, "mlp", models["mlp"])
    yield pool
    pool.close()


@pytest.fixture
def mlp(pool):
    with MLP.rows(pool, "mlp") as batches:
        yield batches


@pytest.fixture
def arenas():
    """The test's slot arenas, closed at its end."""
    with contextlib.ExitStack() as stack:
        yield stack


def load(arenas, model: RowModel, pool, name: str, path):
    """`model` loaded on `pool` as `name`; its batches' arena closed with the test's."""
    model.load(pool, name, path)
    return arenas.enter_context(model.rows(pool, name))


def test_round_trip_equals_onnxruntime(pool, mlp, models):
    x = np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)
    expected = reference(models["mlp"], {"x": x})
    for vgpu in pool.workers:
        out = mlp.submit(vgpu, {"x": x}).result(30)
        assert set(out) == {"relu", "label"}
        np.testing.assert_array_equal(out["relu"], expected["relu"])
        np.testing.assert_array_equal(out["label"], expected["label"])
        assert out["label"].dtype == np.int64
    state = pool.workers["cpu0"]
    assert state.loaded["mlp"]["providers"] == ["CPUExecutionProvider"]
    assert state.last_batch_seconds > 0 and not state.busy and state.queue_length == 0


def test_concurrent_submitters_get_their_own_results(pool, mlp, models):
    rng = np.random.default_rng(2)
    batches = [rng.standard_normal((int(rng.integers(1, 9)), 16)).astype(np.float32) for _ in range(60)]
    ids = list(pool.workers)

    def one(i):
        return mlp.submit(ids[i % len(ids)], {"x": batches[i]}).result(30)

    with ThreadPoolExecutor(6) as threads:
        results = list(threads.map(one, range(len(batches))))
    for x, out in zip(batches, results):
        np.testing.assert_array_equal(out["relu"], reference(models["mlp"], {"x": x})["relu"])


def test_hundreds_in_flight_never_stall(pool, mlp, models):
    """Far more requests than the pipes buffer: submit never blocks, every future completes."""
    x = np.random.default_rng(5).standard_normal((2, 16)).astype(np.float32)
    futures = [mlp.submit("cpu0", {"x": x}) for _ in range(800)]
    expected = reference(models["mlp"], {"x": x})["relu"]
    for future in futures:
        np.testing.assert_array_equal(future.result(60)["relu"], expected)
    assert pool.workers["cpu0"].inflight_runs == 0


def test_asyncio_wrap_future(pool, mlp, models):
    x = np.ones((3, 16), np.float32)

    async def main():
        futures = [asyncio.wrap_future(mlp.submit("cpu1", {"x": x * i})) for i in range(8)]
        return await asyncio.gather(*futures)

    results = asyncio.run(main())
    for i, out in enumerate(results):
        np.testing.assert_array_equal(out["relu"], reference(models["mlp"], {"x": x * i})["relu"])


def test_errors_are_explicit(pool, mlp, models):
    with MLP.rows(pool, "nope") as nope, pytest.raises(WorkerError, match="not loaded"):
        nope.submit("cpu0", {"x": np.zeros((1, 16), np.float32)}).result(30)
    with pytest.raises(WorkerError):  # wrong width: onnxruntime refuses the shape
        mlp.submit("cpu0", {"x": np.zeros((1, 15), np.float32)}).result(30)
    with pytest.raises(KeyError):
        mlp.submit("gpu7", {"x": np.zeros((1, 16), np.float32)})
    with pytest.raises(ValueError, match="at least one row"):
        pool.submit_rows("cpu0", "mlp", ())
    with pytest.raises(WorkerError, match="unknown executor"):
        MLP.load(pool, "m2", models["mlp"], executor="tensorrt")
    # the worker survived all of that
    assert mlp.submit("cpu0", {"x": np.zeros((1, 16), np.float32)}).result(30)["relu"].shape == (1, 8)


def test_outputs_larger_than_inputs(models):
    """Each slot's output region holds its row's outputs, whatever their size beside its input's."""
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1)) as pool:
        GROW.load(pool, "grow", models["grow"])
        with GROW.rows(pool, "grow") as grow:
            for n in (1, 1, 300, 300):
                x = np.random.default_rng(n).standard_normal((n, 16)).astype(np.float32)
                out = grow.submit("cpu0", {"x": x}).result(30)
                np.testing.assert_array_equal(out["y"], reference(models["grow"], {"x": x})["y"])


def wait_for(predicate, timeout=30.0):
    """Poll a condition that other processes or threads bring about (the deadline only ends a hang)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_killed_worker_restarts_and_reruns_the_batch(models, arenas):
    # ~30 GFLOP (hundreds of ms even on an idle machine), so the kill lands mid-batch
    x = np.random.default_rng(3).standard_normal((1024, 768)).astype(np.float32)
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1)) as pool:
        slow = load(arenas, SLOW, pool, "slow", models["slow"])
        mlp = load(arenas, MLP, pool, "mlp", models["mlp"])
        first_pid = pool.workers["cpu0"].pid
        future = slow.submit("cpu0", {"x": x})
        wait_for(lambda: pool.workers["cpu0"].busy)
        assert not future.done()
        os.kill(first_pid, signal.SIGKILL)
        out = future.result(60)  # re-run once on the restarted worker
        np.testing.assert_allclose(out["h24"], reference(models["slow"], {"x": x})["h24"], rtol=1e-4, atol=1e-5)
        state = pool.workers["cpu0"]
        assert state.restarts == 1 and state.pid != first_pid
        # models were reloaded on the new worker
        assert mlp.submit("cpu0", {"x": np.ones((2, 16), np.float32)}).result(30)["relu"].shape == (2, 8)
        assert not os.path.exists(f"/proc/{first_pid}")  # reaped, no zombie


def test_a_worker_dying_once_the_stop_began_is_not_restarted(models, arenas, caplog):
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1)) as pool:
        slow = load(arenas, SLOW, pool, "slow", models["slow"])
        pid = pool.workers["cpu0"].pid
        future = slow.submit("cpu0", {"x": np.ones((1024, 768), np.float32)})
        pool.stop_restarts()
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(WorkerCrashed, match="while the server stops"):
            future.result(60)
        state = pool.workers["cpu0"]
        assert state.restarts == 0 and not state.alive
    assert "restarting it" not in caplog.text


def test_second_crash_fails_the_batch_explicitly(models, arenas):
    x = np.random.default_rng(4).standard_normal((64, 768)).astype(np.float32)
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1)) as pool:
        slow = load(arenas, SLOW, pool, "slow", models["slow"])
        pid = pool.workers["cpu0"].pid
        future = slow.submit("cpu0", {"x": x})
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: pool.workers["cpu0"].pid != pid)
        os.kill(pool.workers["cpu0"].pid, signal.SIGKILL)  # the re-run is queued on it
        with pytest.raises(WorkerCrashed, match="2 time"):
            future.result(60)
        # the vGPU itself keeps serving after its second restart
        wait_for(lambda: pool.workers["cpu0"].restarts == 2)
        assert slow.submit("cpu0", {"x": x[:1]}).result(60)["h24"].shape == (1, 768)


def test_no_retry_budget_fails_at_first_crash_and_the_worker_still_restarts(models, arenas):
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1), crash_retries=0) as pool:
        slow = load(arenas, SLOW, pool, "slow", models["slow"])
        pid = pool.workers["cpu0"].pid
        future = slow.submit("cpu0", {"x": np.ones((64, 768), np.float32)})
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(WorkerCrashed, match="killed by SIGKILL"):
            future.result(30)
        assert slow.submit("cpu0", {"x": np.ones((1, 768), np.float32)}).result(60)["h24"].shape == (1, 768)


def test_restarts_have_no_lifetime_budget_and_back_off_when_deaths_come_quickly(models, arenas, caplog):
    """More deaths than the old budget of five: the worker comes back every time, the deaths in
    quick succession after a delay; each death is a WARNING; models are ready once a live worker
    has them loaded again, and every change is reported."""
    changes = []
    backoff = Backoff(first_s=0.05, max_s=0.2, settle_s=3600)
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1), backoff=backoff,
                    on_change=lambda: changes.append(1)) as pool:  # fmt: skip
        mlp = load(arenas, MLP, pool, "mlp", models["mlp"])
        assert pool.ready_models() == {"mlp"} and changes
        for kill in range(7):
            pid = pool.workers["cpu0"].pid
            seen = len(changes)
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: pool.workers["cpu0"].pid != pid)
            assert len(changes) > seen  # the death and the start
            wait_for(lambda: pool.ready_models() == {"mlp"})
        assert pool.workers["cpu0"].restarts == 7 and pool.workers["cpu0"].alive
        assert mlp.submit("cpu0", {"x": np.ones((2, 16), np.float32)}).result(30)["relu"].shape == (2, 8)
    deaths = [r.getMessage() for r in caplog.records if "died" in r.getMessage() and r.levelname == "WARNING"]
    assert len(deaths) == 7
    assert deaths[0].endswith("restarting it") and all("restarting it in " in d for d in deaths[1:])


def test_backoff_doubles_while_deaths_come_quickly_and_resets_after_a_settled_life():
    backoff = Backoff(first_s=0.5, max_s=5.0, settle_s=30.0)
    backoff.started(0.0)
    assert backoff.delay(100.0) == 0.0  # a long life: at once
    delays = []
    for t in range(6):
        backoff.started(100.0 + t)
        delays.append(backoff.delay(101.0 + t))
    assert delays == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    backoff.started(200.0)
    assert backoff.delay(231.0) == 0.0


def test_ready_models_is_empty_while_the_only_worker_is_dead(models):
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1), backoff=Backoff(first_s=30, settle_s=3600)) as pool:
        MLP.load(pool, "mlp", models["mlp"])
        pid = pool.workers["cpu0"].pid
        os.kill(pid, signal.SIGKILL)  # first death: restarted at once
        wait_for(lambda: pool.workers["cpu0"].pid != pid and pool.ready_models() == {"mlp"})
        pid = pool.workers["cpu0"].pid
        os.kill(pid, signal.SIGKILL)  # second, soon after: it waits 30 s
        wait_for(lambda: not pool.workers["cpu0"].ready)
        assert pool.ready_models() == set() and pool.workers["cpu0"].pid == pid


class ManualClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_stopped_worker_is_not_ready_until_it_answers_again(models, arenas, caplog, monkeypatch):
    """SIGSTOP stands for a worker hung in a driver or starved: readiness said 200 while every
    infer timed out. With batches in flight and no word for `stall_s` (on the pool's clock, moved
    by hand here), its models count as not ready (and `on_change` says so); once it answers, they
    are ready again and the batch's result is right. Meanwhile the monitor must wait its idle
    second between looks: its stall deadline gone by must not make it poll with no wait
    (docs/scheduling.md); every wait it asks of the selector is recorded."""
    changes, waits, pools = [], [], []

    class RecordingSelector(selectors.DefaultSelector):
        def select(self, timeout=None):
            waits.append((bool(pools) and pools[0].workers["cpu0"].stalled, timeout))
            return super().select(timeout)

    monkeypatch.setattr(selectors, "DefaultSelector", RecordingSelector)
    clock = ManualClock()
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1), stall_s=0.5, on_change=lambda: changes.append(1),
                    clock=clock) as pool:  # fmt: skip
        pools.append(pool)
        mlp = load(arenas, MLP, pool, "mlp", models["mlp"])
        pid = pool.workers["cpu0"].pid
        x = np.random.default_rng(4).standard_normal((3, 16)).astype(np.float32)
        os.kill(pid, signal.SIGSTOP)
        try:
            future = mlp.submit("cpu0", {"x": x})
            before = len(changes)
            clock.now += 10.0  # silent for far longer than stall_s
            wait_for(lambda: pool.ready_models() == set())  # the monitor looks within a second
            assert pool.workers["cpu0"].stalled and len(changes) > before and not future.done()
            wait_for(lambda: sum(stalled for stalled, _ in waits) >= 3)  # looks after the one that stalled it
            assert [t for stalled, t in waits if stalled] == [1.0] * sum(s for s, _ in waits)
        finally:
            os.kill(pid, signal.SIGCONT)
        np.testing.assert_array_equal(future.result(60)["relu"], reference(models["mlp"], {"x": x})["relu"])
        wait_for(lambda: pool.ready_models() == {"mlp"})
        assert not pool.workers["cpu0"].stalled and pool.workers["cpu0"].pid == pid  # stalled, never killed
    assert any("no word for" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)


def test_a_send_held_up_across_a_restart_never_reaches_the_successor(models, arenas, monkeypatch):
    """The dead worker's sender thread may have read its pipe's descriptor and not yet written when
    the pool starts the successor, whose pipe can reuse that descriptor number. Here that thread is
    held at exactly that point (and the successor's sender until it has written): the held batch
    must go to the dead pipe, not reach the successor ahead of the model reloads (which failed a
    re-run with "model 'slow' is not loaded" on a loaded machine)."""
    original = connection.Connection._send
    held, release, written, armed = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    holder = []

    def send(self, buf, *args):
        me = threading.current_thread()
        if not (armed.is_set() and me.name.startswith("send-")):
            return original(self, buf)
        if not holder:  # the first send once armed: the batch, to the worker about to die
            holder.append(me)
            handle = self._handle
            held.set()
            release.wait(30)
            try:
                while buf:
                    buf = buf[os.write(handle, buf):]
            finally:
                written.set()
            return None
        if me is not holder[0]:
            written.wait(30)
        return original(self, buf)

    monkeypatch.setattr(connection.Connection, "_send", send)
    x = np.random.default_rng(3).standard_normal((64, 768)).astype(np.float32)
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1)) as pool:
        slow = load(arenas, SLOW, pool, "slow", models["slow"])
        first = pool.workers["cpu0"].pid
        armed.set()
        future = slow.submit("cpu0", {"x": x})
        assert held.wait(30)
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: pool.workers["cpu0"].pid != first)
        release.set()
        out = future.result(60)  # run once, by the successor, after its reload
        np.testing.assert_allclose(out["h24"], reference(models["slow"], {"x": x})["h24"], rtol=1e-4, atol=1e-5)


def test_a_failed_send_leaves_the_pipe_open_until_the_pool_retires_it():
    """A send fails as soon as the worker dies, before the monitor knows; the monitor still reads
    and watches that pipe until it retires the incarnation, so only then may the sender close it."""

    class DeadPipe:
        closed = False
        sends = 0

        def send(self, message):
            self.sends += 1
            raise BrokenPipeError

        def close(self):
            self.closed = True

    pipe, outbox = DeadPipe(), queue.SimpleQueue()
    sender = threading.Thread(target=send_loop, args=(pipe, outbox))
    sender.start()
    for message in ("a batch", "another"):
        outbox.put(message)
    wait_for(outbox.empty)
    assert pipe.sends == 1 and not pipe.closed
    outbox.put(None)  # retired
    sender.join(10)
    assert pipe.closed


def test_close_leaves_no_processes(models, arenas):
    pool = WorkerPool(discover_vgpus("cpu", cpu_vgpus=2))
    slow = load(arenas, SLOW, pool, "slow", models["slow"])
    pids = [s.pid for s in pool.workers.values()]
    futures = [slow.submit(v, {"x": np.ones((64, 768), np.float32)}) for v in pool.workers]
    pool.close(timeout=0.2)  # workers still computing: they are killed, futures fail
    for future in futures:
        assert future.done()
        if future.exception() is not None:
            assert isinstance(future.exception(), PoolClosed)
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}")
    with pytest.raises(PoolClosed):
        slow.submit("cpu0", {"x": np.ones((1, 768), np.float32)})


def test_a_vgpu_that_cannot_start_fails_fast_with_its_reason(models, arenas):
    """A green-context vGPU on a machine without cuda-python/CUDA: no restart loop, no hang."""
    broken = VGpuInfo("gpu0.gc0", "green_context", "fake", "GPU-0", "fake-16sm", 16, None,
                      green_context=(0, 16))  # fmt: skip
    with WorkerPool([broken]) as pool:
        with pytest.raises(WorkerError, match="gpu0.gc0"):
            MLP.load(pool, "mlp", models["mlp"])
        wait_for(lambda: not pool.workers["gpu0.gc0"].alive)
        assert pool.workers["gpu0.gc0"].restarts == 0
        with pytest.raises(PoolClosed, match="dead"):
            arenas.enter_context(MLP.rows(pool, "mlp")).submit("gpu0.gc0", {"x": np.ones((1, 16), np.float32)})
        with pytest.raises(WorkerError, match="dead"):
            MLP.load(pool, "mlp", models["mlp"])


STDIN_SCRIPT = """
from gpu_runtime.vgpu.discovery import discover_vgpus
from gpu_runtime.vgpu.pool import WorkerPool, WorkerCrashed
with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1)) as pool:
    try:
        pool.load_model("mlp", {path!r})
    except WorkerCrashed as exc:
        print("FAILED:", exc, "restarts", pool.workers["cpu0"].restarts)
"""


def test_a_worker_that_cannot_start_under_spawn_is_not_restarted(models):
    """`python -` scripts have no importable __main__, so spawned workers exit with code 1 at once."""
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-"], input=STDIN_SCRIPT.format(path=models["mlp"]), text=True,
        capture_output=True, timeout=60, env={**os.environ, "PYTHONPATH": root},
    )  # fmt: skip
    assert "FAILED: cpu0: worker exited with code 1 during startup" in done.stdout
    assert done.stdout.strip().endswith("restarts 0")


def test_a_load_never_holds_up_batches_of_other_models(models, arenas, tmp_path):
    """The load of `gated` cannot finish before its gate file exists: batches of the loaded model
    still come back meanwhile, and once unloaded a model is refused (and can be loaded again)."""
    gated = tmp_path / "gated.onnx"
    gated.write_bytes(Path(models["mlp"]).read_bytes())
    x = np.random.default_rng(6).standard_normal((2, 16)).astype(np.float32)
    expected = reference(models["mlp"], {"x": x})["relu"]
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1), engine=GatedEngine) as pool, \
            ThreadPoolExecutor(1) as threads:  # fmt: skip
        mlp = load(arenas, MLP, pool, "mlp", models["mlp"])
        gated_rows = arenas.enter_context(MLP.rows(pool, "gated"))
        loading = threads.submit(MLP.load, pool, "gated", gated)
        for _ in range(3):
            np.testing.assert_array_equal(mlp.submit("cpu0", {"x": x}).result(30)["relu"], expected)
        assert not loading.done()
        gated.with_suffix(".gate").touch()
        assert loading.result(30)["cpu0"]["providers"] == ["CPUExecutionProvider"]
        np.testing.assert_array_equal(gated_rows.submit("cpu0", {"x": x}).result(30)["relu"], expected)
        pool.unload_model("gated")
        assert "gated" not in pool.workers["cpu0"].loaded
        with pytest.raises(WorkerError, match="not loaded"):
            gated_rows.submit("cpu0", {"x": x}).result(30)
        MLP.load(pool, "gated", gated)
        np.testing.assert_array_equal(gated_rows.submit("cpu0", {"x": x}).result(30)["relu"], expected)
