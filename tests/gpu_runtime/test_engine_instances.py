"""A model's executor instances in the vGPU worker's engine (`serial_engine`, its config's
`instance_group` count on that vGPU): with `count` instances at most `count` of its batches run at
once, each on an instance of its own, and a batch waiting for one never holds up another model's.
Observed with executors whose runs block on an event, never by timing."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from gpu_runtime.priority import Priority
from gpu_runtime.vgpu import serial_engine
from gpu_runtime.vgpu.discovery import VGpuInfo

pytestmark = pytest.mark.timeout(60)
WAIT_S = 30  # a bound on waiting for what must happen (never reached when it does)


class Gate:
    """Runs that each block until released; which executor instance ran each is recorded."""

    def __init__(self):
        self.release = threading.Event()
        self.started = threading.Semaphore(0)
        self.running: list[int] = []  # the instance of each started run
        self.lock = threading.Lock()
        self.loaded = 0


@pytest.fixture
def gate(monkeypatch):
    gate = Gate()

    class Runner:
        def __init__(self, path, info, max_batch):
            self.index, gate.loaded = gate.loaded, gate.loaded + 1
            self.blocks = path == "blocking"

        def describe(self):
            return {"executor": "fake"}

        def run(self, inputs):
            with gate.lock:
                gate.running.append(self.index)
            gate.started.release()
            if self.blocks:
                assert gate.release.wait(WAIT_S)
            return {"y": inputs["x"]}

    monkeypatch.setattr(serial_engine.vgpu_executors, "spec", lambda e: SimpleNamespace(program_executor=None))
    monkeypatch.setattr(serial_engine.vgpu_executors, "loader", lambda e: Runner)
    return gate


def engine(kind: str, threads: int | None):
    info = VGpuInfo(f"{kind}0", kind, kind, None, kind, None, None, threads=threads)
    return serial_engine.SerialEngine(info)


def started(gate: Gate, n: int) -> None:
    for _ in range(n):
        assert gate.started.acquire(timeout=WAIT_S), "a run that must start did not"


def test_count_two_runs_two_batches_at_once_on_their_own_instances(gate):
    vgpu = engine("cpu", threads=3)
    try:
        assert vgpu.load("m", "blocking", "fake", 4, instances=2)["instances"] == 2
        vgpu.load("other", "free", "fake", 4)
        runs = [vgpu.run("m", {"x": i}, Priority.BE) for i in range(3)]
        started(gate, 2)
        assert sorted(gate.running) == [0, 1]  # two instances, each running one batch
        # the third batch waits for an instance; the lane's third thread runs another model past it
        assert vgpu.run("other", {"x": 9}, Priority.BE).result(WAIT_S)[0] == {"y": 9}
        assert len(gate.running) == 3 and not runs[2].done()  # only m's two and `other` ran
        gate.release.set()
        assert [r.result(WAIT_S)[0]["y"] for r in runs] == [0, 1, 2]
    finally:
        gate.release.set()
        vgpu.close()


def test_count_one_runs_one_batch_at_a_time(gate):
    vgpu = engine("cpu", threads=2)
    try:
        vgpu.load("m", "blocking", "fake", 4, instances=1)
        vgpu.load("other", "free", "fake", 4)
        runs = [vgpu.run("m", {"x": i}, Priority.BE) for i in range(2)]
        started(gate, 1)
        assert vgpu.run("other", {"x": 9}, Priority.BE).result(WAIT_S)[0] == {"y": 9}
        assert gate.running == [0, 1] and not runs[1].done()  # m's one run, then `other` (executor 1)
        gate.release.set()
        assert [r.result(WAIT_S)[0]["y"] for r in runs] == [0, 1]
    finally:
        gate.release.set()
        vgpu.close()


def test_without_instance_group_one_executor_serves_every_lane_thread(gate):
    vgpu = engine("cpu", threads=2)
    try:
        assert vgpu.load("m", "blocking", "fake", 4)["instances"] == 1
        runs = [vgpu.run("m", {"x": i}, Priority.BE) for i in range(2)]
        started(gate, 2)
        assert gate.running == [0, 0]  # a reentrant executor: both batches on it at once
        gate.release.set()
        assert [r.result(WAIT_S)[0]["y"] for r in runs] == [0, 1]
    finally:
        gate.release.set()
        vgpu.close()


def test_a_gpu_vgpu_grows_its_lane_to_the_count(gate):
    """A GPU vGPU runs one BE batch at a time by default; count: 2 there runs two."""
    vgpu = engine("mig", threads=None)
    try:
        vgpu.load("m", "blocking", "fake", 4, instances=2)
        runs = [vgpu.run("m", {"x": i}, Priority.BE) for i in range(2)]
        started(gate, 2)
        assert sorted(gate.running) == [0, 1]
        gate.release.set()
        assert [r.result(WAIT_S)[0]["y"] for r in runs] == [0, 1]
        assert vgpu.warm_up("m", {"x": 5})[0] == {"y": 5}  # the loader thread takes a free instance too
    finally:
        gate.release.set()
        vgpu.close()


def test_a_batch_of_an_unloaded_model_fails_and_the_lane_serves_on(gate):
    vgpu = engine("cpu", threads=1)
    try:
        with pytest.raises(KeyError, match="not loaded"):
            vgpu.run("nope", {"x": 1}, Priority.BE).result(WAIT_S)
        vgpu.load("m", "free", "fake", 4, instances=1)
        assert vgpu.run("m", {"x": 1}, Priority.RT).result(WAIT_S)[0] == {"y": 1}
    finally:
        vgpu.close()
