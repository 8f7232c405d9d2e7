"""Residency with stable addresses (docs/residency.md, "GPUs"): the virtual pool maps its chunks made
once under each model's reserved ranges, never over a mapped range, never a chunk still under a
victim, and allocates nothing at a switch; on the CUDA emulator (the same path over host memory,
`vmm_host`) REEF's engine serves models beyond its budget right, their weights and arenas in the
pool, each launch waiting only for its own group."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

from gpu_runtime.compiler.shapes import ModelShapes
from gpu_runtime.priority import Priority
from gpu_runtime.residency import settings as residency_settings
from gpu_runtime.residency.settings import ResidencySettings
from gpu_runtime.residency.vmm import VirtualPool, round_up
from gpu_runtime.residency.vmm_host import HostVmm
from gpu_runtime.vgpu.discovery import discover_vgpus
from scheduler.vgpu_engine import ReefEngine
from tests.gpu_runtime.test_residency import load_three_staged

from atoll.bench.switch_models import mlp


class RecordingDriver:
    """A `vmm` driver (host memory underneath) that records every call and asserts CUDA's rules and
    the pool's promises as they happen."""

    def __init__(self, granularity: int = 64 << 10, inner=None):
        self.inner = inner or HostVmm(granularity)
        self.calls: list[tuple] = []
        self.frozen = False  # set once loads are done: from then on nothing may be created
        self.ranges: dict[int, int] = {}  # reserved address -> bytes
        self.mapped: dict[int, int] = {}  # chunk address -> handle
        self.live: set[int] = set()  # handles created and not released

    def granularity(self) -> int:
        return self.inner.granularity()

    def create(self, nbytes):
        assert not self.frozen, "memory created at switch time"
        handle = self.inner.create(nbytes)
        self.live.add(handle)
        self.calls.append(("create", handle))
        return handle

    def release(self, handle):
        assert handle in self.live and handle not in self.mapped.values()
        self.live.discard(handle)
        self.calls.append(("release", handle))
        self.inner.release(handle)

    def reserve(self, nbytes):
        assert not self.frozen, "a range reserved at switch time"
        address = self.inner.reserve(nbytes)
        self.ranges[address] = nbytes
        self.calls.append(("reserve", address, nbytes))
        return address

    def free(self, address, nbytes):
        assert self.ranges.pop(address) == nbytes
        assert not any(address <= a < address + nbytes for a in self.mapped), "a mapped range freed"
        self.calls.append(("free", address))
        self.inner.free(address, nbytes)

    def map(self, address, nbytes, handle):
        assert nbytes == self.granularity() and address % self.granularity() == 0
        assert any(a <= address and address + nbytes <= a + n for a, n in self.ranges.items()), "outside a range"
        assert address not in self.mapped, "mapped over a mapped range"
        assert handle in self.live and handle not in self.mapped.values(), "a chunk still mapped elsewhere"
        self.mapped[address] = handle
        self.calls.append(("map", address, handle))
        self.inner.map(address, nbytes, handle)

    def unmap(self, address, nbytes):
        assert nbytes == self.granularity() and address in self.mapped, "unmapping what is not one mapping"
        del self.mapped[address]
        self.calls.append(("unmap", address))
        self.inner.unmap(address, nbytes)

    def set_access(self, address, nbytes):
        chunk = self.granularity()
        assert all(a in self.mapped for a in range(address, address + nbytes, chunk)), "access on unmapped"
        self.inner.set_access(address, nbytes)

    def array(self, address, nbytes):
        return self.inner.array(address, nbytes)

    def data_ptr(self, view) -> int:
        return view.ctypes.data if isinstance(view, np.ndarray) else view.data.ptr

    def close(self):
        self.inner.close()


def test_virtual_pool_maps_chunks_made_once_under_stable_ranges():
    driver = RecordingDriver()
    chunk = driver.granularity()
    pool = VirtualPool(driver, 4 * chunk)
    views = {}
    for model, nbytes in (("a", 2 * chunk), ("b", chunk + 1), ("c", 3 * chunk)):
        _, views[model] = pool.reserve(model, nbytes)
        views[model][:] = ord(model)  # backed by its own chunks while it loads
        pool.unback(model)
    assert pool.footprint("b") == 2 * chunk and pool.footprint("c") == 3 * chunk
    superseded, _ = pool.reserve("d", chunk)  # an arena a larger one replaced while "d" loaded
    pool.reserve("d", 2 * chunk)
    pool.drop("d", superseded)
    pool.unback("d")
    assert pool.footprint("d") == 2 * chunk and superseded not in driver.ranges
    driver.frozen = True
    addresses = {m: v.ctypes.data for m, v in views.items()}
    pool.map("a", 0)
    pool.map("b", 2 * chunk)
    views["a"][:] = 1
    views["b"][:] = 2
    with pytest.raises(RuntimeError):
        pool.map("c", 0)  # a's chunks are still under a: a chunk is never under two ranges
    pool.unmap("a")
    with pytest.raises(RuntimeError):
        pool.map("c", 0)  # chunks 0-2, but chunk 2 is b's
    pool.unmap("b")
    pool.map("c", chunk)
    views["c"][:] = 3
    pool.unmap("c")
    pool.map("a", 2 * chunk)  # a elsewhere in the pool, at the same address
    views["a"][:] = 4
    assert {m: v.ctypes.data for m, v in views.items()} == addresses
    maps = [c for c in driver.calls if c[0] == "map"]
    assert maps[-2:] == [("map", addresses["a"], pool._handles[2]), ("map", addresses["a"] + chunk, pool._handles[3])]
    pool.close()
    assert not driver.live and not driver.ranges and not driver.mapped


def _session(path):
    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])


@pytest.mark.timeout(300)
def test_emulated_engine_switches_in_place_under_stable_addresses(tmp_path, monkeypatch):
    driver = RecordingDriver()
    monkeypatch.setattr(residency_settings, "HostVmm", lambda: driver)
    paths = [mlp(tmp_path / f"m{i}.onnx", i) for i in range(3)]
    shapes = ModelShapes(paths[0])
    chunk = driver.granularity()
    # weights and one arena per priority (the largest batch's), each range whole chunks
    footprint = round_up(shapes.program((1, None)).weight_bytes, chunk) + len(Priority) * round_up(
        shapes.program((2, None)).arena_bytes, chunk)
    settings = ResidencySettings(budget_bytes=2 * footprint + 1000, bandwidth=20e6)  # two models fit
    engine = ReefEngine(discover_vgpus("cpu", cpu_vgpus=1)[0], policy="reset", residency=settings)
    try:
        engine.prepare("cuda-emu")
        described = load_three_staged(engine, paths, "cuda-emu")
        assert all(d["residency"]["footprint"] == footprint for d in described)
        residency = engine.residency
        states = {m: residency._models[m].states for m in ("m0", "m1", "m2")}
        args_before = {m: [list(map(id, s.args[0])) for s in st] for m, st in states.items()}
        addresses = {m: [v.ctypes.data for v in st[0].views] for m, st in states.items()}
        driver.frozen = True  # a switch creates and reserves nothing
        rng = np.random.default_rng(5)
        order = ["m2", "m0", "m1", "m2", "m0", "m0"]
        for model in order:  # one at a time: each batch finds the others idle
            x = rng.standard_normal((1, 128)).astype(np.float32)
            outputs, _ = engine.run(model, {"x": x}, Priority.BE).result(60)
            expected = _session(paths[int(model[1])]).run(None, {"x": x})[0]
            np.testing.assert_allclose(outputs["r6"], expected, rtol=1e-4, atol=1e-5)
        assert [s.model for s in residency.stats.switches] == ["m2", "m0", "m1", "m2", "m0"]
        # every state kept its buffers' addresses and its launch arguments: what a graph captured
        assert {m: [v.ctypes.data for v in st[0].views] for m, st in states.items()} == addresses
        assert {m: [list(map(id, s.args[0])) for s in st] for m, st in states.items()} == args_before
        # each victim's chunks were unmapped before the incoming model mapped them (the driver
        # asserts it at every map); the first launch ran before the last group had arrived
        assert sum(c[0] == "unmap" for c in driver.calls) >= 5 * footprint // chunk
        assert all(s.first_launch_s < s.arrived_s for s in residency.stats.switches)
        assert len(driver.mapped) == 2 * footprint // chunk  # two models' ranges, all of the pool they take
    finally:
        engine.close()


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_cupy_engine_switches_under_captured_graphs(tmp_path, monkeypatch):
    """On a GPU: REEF's engine on the cupy executor (CUDA graphs, chunk graphs, the native RT
    launcher) with a budget for two of three models; answers right, graphs and addresses unchanged,
    CUDA's virtual memory calls obeying the recording driver's rules, nothing made at a switch."""
    from gpu_runtime.residency.vmm_cuda import CudaVmm

    driver = None

    def recording():
        nonlocal driver
        driver = RecordingDriver(inner=CudaVmm())
        return driver

    monkeypatch.setattr(residency_settings, "CudaVmm", recording)
    paths = [mlp(tmp_path / f"m{i}.onnx", i, 6, 512) for i in range(3)]
    program = ModelShapes(paths[0]).program((2, None))
    chunk = 2 << 20
    # weights and arenas per priority, each whole chunks, one more as margin (a chunked re-plan's)
    footprint = round_up(program.weight_bytes, chunk) + 3 * round_up(program.arena_bytes, chunk)
    settings = ResidencySettings(budget_bytes=2 * footprint)
    engine = ReefEngine(discover_vgpus("gpu")[0], policy="reef", residency=settings)
    try:
        described = [engine.load(f"m{i}", p, "cupy", max_batch=2)["residency"] for i, p in enumerate(paths)]
        assert not all(d["resident"] for d in described)
        residency = engine.residency
        states = {m: residency._models[m].states for m in ("m0", "m1", "m2")}
        graphs = {m: [(id(s.graph), tuple(map(id, s.chunk_graphs))) for s in st] for m, st in states.items()}
        addresses = {m: [driver.data_ptr(v) for v in st[0].views] for m, st in states.items()}
        driver.frozen = True
        rng = np.random.default_rng(7)
        for model in ["m2", "m0", "m1", "m2", "m0", "m1"]:
            x = rng.standard_normal((2, 512)).astype(np.float32)
            priority = Priority.RT if model == "m1" else Priority.BE
            outputs, _ = engine.run(model, {"x": x}, priority).result(60)
            expected = _session(paths[int(model[1])]).run(None, {"x": x})[0]
            np.testing.assert_allclose(outputs["r6"], expected, rtol=1e-3, atol=1e-4)
        assert len(residency.stats.switches) >= 3
        assert {m: [(id(s.graph), tuple(map(id, s.chunk_graphs))) for s in st] for m, st in states.items()} == graphs
        assert {m: [driver.data_ptr(v) for v in st[0].views] for m, st in states.items()} == addresses
    finally:
        engine.close()
