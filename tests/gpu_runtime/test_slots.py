"""Rows in slot arenas through the real WorkerPool (`submit_rows`): batches built from slots with
one copy at most (none for packed consecutive rows), variable lengths zero-padded and each row's
outputs cut back to its share, static batch sizes padded, every shape built at load and anything
else counted; results equal onnxruntime on the same rows (the reference)."""

from __future__ import annotations

import gc
import secrets
import sys

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpu_runtime.vgpu.batches import BatchBuilder, batch_sizes, padded_size
from gpu_runtime.vgpu.discovery import discover_vgpus
from gpu_runtime.vgpu.messages import BatchSpec, Row
from gpu_runtime.vgpu.pool import WorkerError, WorkerPool
from gpu_runtime.vgpu.slots import SlotArena
from tests.gpu_runtime.chain_model import matmul_chain, save

pytestmark = pytest.mark.timeout(120)
FRAMES = BatchSpec("x", (4, -1), {"y": (-1, 3)})


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("slots")
    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    frames = helper.make_graph(  # (N, 4, T) -> (N, T, 3): one output frame per input frame
        [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
         helper.make_node("MatMul", ["t", "w"], ["y"])],
        "frames", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "T", 3])],
        [numpy_helper.from_array(w, "w")])  # fmt: skip
    return {"frames": save(frames, d / "frames.onnx"),
            "chain": matmul_chain(d / "chain.onnx", np.random.default_rng(1), layers=3, width=64)}


def reference(path, x):
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.fixture
def arena():
    arena = SlotArena.create(f"atoll-test-{secrets.token_hex(4)}", 8, 4 * 64 * 4, 64 * 4 * 4)
    yield arena
    arena.close()


def test_arena_geometry_and_views(arena):
    seen = SlotArena.attach(arena.name)
    try:
        assert (seen.count, seen.in_stride) == (8, 4 * 64 * 4)
        arena.input(3, (4, 64))[...] = 7.0
        np.testing.assert_array_equal(seen.input(3, (4, 64)), 7.0)
        assert arena.packed((4, 64)) and not arena.packed((4, 10))
        both = seen.inputs(2, 2, (4, 64))
        assert both.shape == (2, 4, 64) and (both[1] == 7).all()
        with pytest.raises(ValueError, match="cannot hold"):
            seen.inputs(2, 2, (4, 10))  # short rows leave gaps between slots
        with pytest.raises(ValueError, match="cannot hold"):
            seen.input(0, (4, 65))
        assert len(seen.output(7)) == arena.out_stride
        del both  # views pin the mapping
    finally:
        seen.close()


def test_batch_sizes_and_padding():
    assert batch_sizes(None) == () and batch_sizes(1) == (1,)
    assert batch_sizes(12) == (1, 2, 4, 8, 12)
    assert [padded_size(n, (1, 2, 4, 8, 12)) for n in (1, 3, 5, 9, 12, 13)] == [1, 4, 8, 12, 12, 13]
    assert padded_size(5, ()) == 5


def test_builder_runs_packed_rows_in_place(arena):
    builder = BatchBuilder()
    spec = BatchSpec("x", (4, 64), {"y": (64, 3)})
    try:
        rows = tuple(Row(arena.name, i, (4, 64)) for i in (2, 3))
        inputs, release = builder.build(spec, rows, None, ())
        batch = inputs["x"]
        batch[0, 0, 0] = 5.0  # a view of the slots, not a copy
        assert arena.input(2, (4, 64))[0, 0] == 5.0
        release()
        inputs, release = builder.build(spec, tuple(Row(arena.name, i, (4, 64)) for i in (3, 2)), None, ())
        gathered = inputs["x"]
        gathered[1, 0, 0] = 6.0
        assert arena.input(2, (4, 64))[0, 0] == 5.0  # rows out of order: copied
        release()
        del batch, gathered, inputs  # views pin the mapping
    finally:
        builder.close()


def test_rows_of_different_lengths(models, arena):
    rng = np.random.default_rng(2)
    lengths = (16, 64)
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1)) as pool:
        described = pool.load_model("frames", models["frames"], max_batch=4, batch=FRAMES, lengths=lengths)
        assert described["cpu0"]["out_row_bytes"] == 64 * 3 * 4  # the longest padded row
        rows, xs = [], []
        for index, t in ((5, 10), (1, 16), (6, 40)):
            x = rng.standard_normal((4, t)).astype(np.float32)
            arena.input(index, x.shape)[...] = x
            rows.append(Row(arena.name, index, x.shape))
            xs.append(x)
        layouts = pool.submit_rows("cpu0", "frames", tuple(rows), length=64).result(30)
        for row, x, layout in zip(rows, xs, layouts):
            padded = np.zeros((1, 4, 64), np.float32)
            padded[0, :, : x.shape[1]] = x
            want = reference(models["frames"], padded)[0][: x.shape[1]]  # the row's own frames
            [(name, dtype, shape, offset)] = layout
            got = np.frombuffer(arena.output(row.index), dtype, count=int(np.prod(shape)), offset=offset)
            np.testing.assert_allclose(got.reshape(shape), want, rtol=1e-6, atol=1e-6)
        assert pool.workers["cpu0"].program_builds == 0
        short = Row(arena.name, 0, (4, 8))
        pool.submit_rows("cpu0", "frames", (short,), length=32).result(30)  # 32 was not loaded
        assert pool.workers["cpu0"].program_builds == 1
        with pytest.raises(WorkerError, match="does not fit"):
            pool.submit_rows("cpu0", "frames", (Row(arena.name, 0, (4, 65)),), length=64).result(30)
        with pytest.raises(WorkerError, match="no BatchSpec"):
            pool.load_model("chain", models["chain"])
            pool.submit_rows("cpu0", "chain", (Row(arena.name, 0, (64,)),)).result(30)


@pytest.mark.parametrize("executor", ["onnxruntime", "numpy"])
def test_static_batches_pad_to_a_built_size(models, executor):
    spec = BatchSpec("x", (64,), {"h3": (64,)})
    arena = SlotArena.create(f"atoll-test-{secrets.token_hex(4)}", 8, 64 * 4, 64 * 4)
    try:
        rng = np.random.default_rng(3)
        x = rng.standard_normal((3, 64)).astype(np.float32)
        for i, index in enumerate((6, 1, 4)):
            arena.input(index, (64,))[...] = x[i]
        with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1), executor=executor) as pool:
            described = pool.load_model("chain", models["chain"], max_batch=4, batch=spec)["cpu0"]
            assert described["batch_sizes"] == ([1, 2, 4] if executor == "numpy" else [])
            rows = tuple(Row(arena.name, index, (64,)) for index in (6, 1, 4))
            layouts = pool.submit_rows("cpu0", "chain", rows).result(30)  # runs at 4 on numpy
            assert pool.workers["cpu0"].program_builds == 0
        want = reference(models["chain"], x)
        for i, (index, layout) in enumerate(zip((6, 1, 4), layouts)):
            [(_, dtype, shape, offset)] = layout
            got = np.frombuffer(arena.output(index), dtype, count=64, offset=offset)
            np.testing.assert_allclose(got, want[i], rtol=1e-4, atol=1e-5)
    finally:
        arena.close()


def test_an_arena_closed_under_a_live_view_lets_go_quietly(monkeypatch):
    """A batch's input can still view an arena when its model is unloaded: the mapping then stays
    until the view goes, and nothing is printed (SharedMemory.__del__ used to close it again and
    print 'Exception ignored ... BufferError: cannot close exported pointers exist')."""

    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    arena = SlotArena.create(f"atoll-test-{secrets.token_hex(4)}", 2, 64, 64)
    view = np.frombuffer(arena.output(0), np.uint8)
    view[:] = 7
    arena.close()
    del arena
    gc.collect()
    assert unraisable == [] and view.sum() == 7 * 64
