"""A model unloaded and loaded again through the real WorkerPool, its rows in a new slot arena that
has the old one's name (as a server's arenas had): the worker must read and write the new arena, not
a mapping it kept of the old one (which answered all zeros after a reload), and must not keep the
old arena mapped once its model is unloaded."""

from __future__ import annotations

import os
import secrets
import time

import numpy as np
import onnxruntime
import pytest

from gpu_runtime.vgpu.discovery import discover_vgpus
from gpu_runtime.vgpu.messages import BatchSpec, Row
from gpu_runtime.vgpu.pool import WorkerPool
from gpu_runtime.vgpu.slots import SlotArena
from tests.gpu_runtime.chain_model import matmul_chain

pytestmark = pytest.mark.timeout(120)
SPEC = BatchSpec("x", (64,), {"h2": (64,)})


def mapped(pid: int, name: str) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return any(name in line for line in f)


def unmapped_soon(pid: int, name: str) -> bool:
    """Whether the worker unmaps `name` within seconds (a thread may drop its last view just after
    the unload was answered)."""
    deadline = time.monotonic() + 10
    while mapped(pid, name):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def run_row(pool, arena, x):
    arena.input(0, x.shape)[...] = x
    [layout] = pool.submit_rows("cpu0", "chain", (Row(arena.name, 0, x.shape),)).result(30)
    [(_, dtype, shape, offset)] = layout
    return np.frombuffer(arena.output(0), dtype, count=int(np.prod(shape)), offset=offset).copy()


def test_a_reloaded_model_uses_the_new_arena_of_the_old_name(tmp_path):
    path = matmul_chain(tmp_path / "chain.onnx", np.random.default_rng(1), layers=2, width=64)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(2)
    first, second = (rng.standard_normal(64).astype(np.float32) for _ in range(2))
    name = f"atoll-test-{secrets.token_hex(4)}"
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1)) as pool:
        pid = pool.workers["cpu0"].pid
        arena = SlotArena.create(name, 4, 64 * 4, 64 * 4)
        try:
            pool.load_model("chain", path, max_batch=2, batch=SPEC)
            got = run_row(pool, arena, first)
            np.testing.assert_allclose(got, session.run(None, {"x": first[None]})[0][0], rtol=1e-4, atol=1e-5)
            pool.unload_model("chain")
            assert unmapped_soon(pid, name), "the unloaded model's arena is still mapped in the worker"
        finally:
            arena.close()
        arena = SlotArena.create(name, 4, 64 * 4, 64 * 4)  # fresh pages, the same name
        try:
            pool.load_model("chain", path, max_batch=2, batch=SPEC)
            got = run_row(pool, arena, second)
            np.testing.assert_allclose(got, session.run(None, {"x": second[None]})[0][0], rtol=1e-4, atol=1e-5)
            assert os.path.exists(f"/dev/shm/{name}")
        finally:
            arena.close()
