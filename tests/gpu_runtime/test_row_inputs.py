"""Slot rows holding every input of a request (`slots.row_layout`, `BatchBuilder.build`):
each input at its aligned offset in its own dtype and shape, rows of equal shapes stacked input by
input (a lone row run where it is), rows of other shapes refused, a model without batching given
the row itself; and through the real WorkerPool, a two-input INT32 model warmed in its dtype whose
outputs equal onnxruntime's."""

from __future__ import annotations

import secrets

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

from gpu_runtime.vgpu.batches import BatchBuilder
from gpu_runtime.vgpu.discovery import discover_vgpus
from gpu_runtime.vgpu.messages import BatchSpec, Row
from gpu_runtime.vgpu.pool import WorkerPool
from gpu_runtime.vgpu.shm import ALIGN
from gpu_runtime.vgpu.worker import _warm_up_inputs
from gpu_runtime.vgpu.slots import SlotArena, pack_bytes, row_layout, unpack_bytes
from tests.gpu_runtime.chain_model import save

pytestmark = pytest.mark.timeout(120)
FIELDS = [("ids", (-1,), np.int64), ("mask", (3,), np.bool_)]


def _spec(fields, batched=True, bound=8):
    layout, _ = row_layout(fields, bound)
    return BatchSpec(fields[0][0], fields[0][1], {"y": (-1,)}, layout[0].dtype.name, layout, batched)


def test_row_layout_puts_each_input_at_an_aligned_offset():
    fields, size = row_layout(FIELDS + [("half", (2, 2), np.float16)], dim_bound=100)
    assert [(f.name, f.offset) for f in fields] == [("ids", 0), ("mask", 832), ("half", 832 + ALIGN)]
    assert [f.dtype for f in fields] == [np.dtype(np.int64), np.dtype(np.bool_), np.dtype(np.float16)]
    assert size == 832 + 2 * ALIGN  # 100 int64 = 800 bytes, aligned up; then 3 and 8 bytes, aligned


def _write(arena, index, ids, mask, spec) -> Row:
    ids_field, mask_field = spec.row_inputs
    arena.input(index, ids.shape, ids_field.dtype, ids_field.offset)[...] = ids
    arena.input(index, mask.shape, mask_field.dtype, mask_field.offset)[...] = mask
    return Row(arena.name, index, ids.shape, (mask.shape,))


def test_rows_of_equal_shapes_batch_input_by_input():
    spec = _spec(FIELDS)
    arena = SlotArena.create(f"atoll-test-{secrets.token_hex(4)}", 4, row_layout(FIELDS, 8)[1], 64)
    builder = BatchBuilder()
    try:
        rows = [_write(arena, i, np.arange(5) + 10 * i, np.array([i % 2 == 0, True, False]), spec) for i in range(3)]
        inputs, release = builder.build(spec, tuple(rows), None, (1, 2, 4))
        assert inputs["ids"].shape == (4, 5) and inputs["ids"].dtype == np.int64  # padded up to the built size 4
        np.testing.assert_array_equal(inputs["ids"][:3], [np.arange(5) + 10 * i for i in range(3)])
        assert not inputs["ids"][3].any() and not inputs["mask"][3].any()
        np.testing.assert_array_equal(inputs["mask"][:3, 0], [True, False, True])
        release()
        alone, _ = builder.build(spec, (rows[1],), None, ())
        arena.input(1, (5,), np.int64)[...] = -1  # run where it is: the slot's own memory
        np.testing.assert_array_equal(alone["ids"], [[-1] * 5])
        other = _write(arena, 3, np.arange(6), np.zeros(3, bool), spec)
        with pytest.raises(ValueError, match="in one batch"):
            builder.build(spec, (rows[0], other), None, ())
        whole = _spec(FIELDS, batched=False)
        inputs, _ = builder.build(whole, (rows[2],), None, ())
        assert inputs["ids"].shape == (5,) and inputs["mask"].shape == (3,)
        layouts = builder.scatter(whole, (rows[2],), {"y": np.arange(4.0)}, None)
        assert layouts[0][0][2] == (4,)  # a model without batching: its outputs as they are
    finally:
        builder.close()
        arena.close()


def test_a_two_input_int32_model_through_the_worker_pool(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["sum"]), helper.make_node("Sub", ["a", "b"], ["diff"])], "g",
        [helper.make_tensor_value_info(n, TensorProto.INT32, ["N", 16]) for n in "ab"],
        [helper.make_tensor_value_info(n, TensorProto.INT32, ["N", 16]) for n in ("sum", "diff")])  # fmt: skip
    path = save(graph, tmp_path / "two.onnx")
    fields = [("a", (16,), np.int32), ("b", (16,), np.int32)]
    layout, size = row_layout(fields, 1)
    spec = BatchSpec("a", (16,), {"sum": (16,), "diff": (16,)}, "int32", layout, True)
    arena = SlotArena.create(f"atoll-test-{secrets.token_hex(4)}", 4, size, 256)
    rng = np.random.default_rng(5)
    a, b = rng.integers(-50, 50, (3, 16), dtype=np.int32), rng.integers(-50, 50, (3, 16), dtype=np.int32)
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1)[:1], executor="onnxruntime") as pool:
        try:
            pool.load_model("two", path, max_batch=4, batch=spec)
            rows = []
            for i in range(3):
                arena.input(i, (16,), np.int32, layout[0].offset)[...] = a[i]
                arena.input(i, (16,), np.int32, layout[1].offset)[...] = b[i]
                rows.append(Row(arena.name, i, (16,), ((16,),)))
            layouts = pool.submit_rows("cpu0", "two", tuple(rows)).result(30)
            session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            want_sum, want_diff = session.run(["sum", "diff"], {"a": a, "b": b})
            for i, layout in enumerate(layouts):
                got = {name: np.frombuffer(arena.output(i), np.dtype(dt), int(np.prod(shape)), offset).reshape(shape)
                       for name, dt, shape, offset in layout}  # fmt: skip
                np.testing.assert_array_equal(got["sum"], want_sum[i])
                np.testing.assert_array_equal(got["diff"], want_diff[i])
            assert pool.workers["cpu0"].program_builds == 0
        finally:
            arena.close()


def test_bytes_elements_round_trip_through_a_row_and_their_room_is_bounded():
    fields, size = row_layout([("text", (-1,), object), ("n", (1,), np.int32)], dim_bound=4, bytes_room=40)
    assert [(f.offset, f.room) for f in fields] == [(0, ALIGN), (ALIGN, ALIGN)]  # 40 bytes, aligned up
    region = np.zeros(fields[0].room, np.uint8)
    pack_bytes([b"cat", "\u00e9mu", b""], region)
    assert region[:7].tobytes() == b"\x03\x00\x00\x00cat"
    assert unpack_bytes(region, (3,)).tolist() == ["cat", "\u00e9mu", ""]
    with pytest.raises(ValueError, match="exceed the row's room of 64"):
        pack_bytes([b"x" * 61], region)
    spec = BatchSpec("text", (-1,), {"y": (-1,)}, "object", fields, True)
    arena = SlotArena.create(f"atoll-test-{secrets.token_hex(4)}", 2, size, 64)
    builder = BatchBuilder()
    try:
        for i, words in enumerate((["a", "b"], ["c", "dd"])):
            pack_bytes(words, arena.input(i, (fields[0].room,), np.uint8, 0))
        rows = tuple(Row(arena.name, i, (2,), ((1,),)) for i in range(2))
        inputs, release = builder.build(spec, rows, None, (1, 2))
        assert inputs["text"].tolist() == [["a", "b"], ["c", "dd"]] and inputs["text"].dtype == object
        release()
        alone, _ = builder.build(spec, rows[1:], None, ())
        assert alone["text"].tolist() == [["c", "dd"]]
    finally:
        builder.close()
        arena.close()


def test_warm_up_runs_each_built_batch_size_then_the_configs_samples_and_nothing_at_a_bound():
    fields, _ = row_layout([("a", (3,), np.int32), ("t", (2,), object)], dim_bound=4, bytes_room=64)
    sample = (2, 3, (("a", (3,), "random_data"), ("t", (2,), "zero_data")))
    spec = BatchSpec("a", (3,), {}, "int32", fields, True, (sample,))
    runs = list(_warm_up_inputs(spec, (1, 2)))  # an executor with a program per batch size
    assert [{k: (v.shape, v.dtype) for k, v in run.items()} for run in runs] == (
        [{"a": ((b, 3), np.int32), "t": ((b, 2), object)} for b in (1, 2)]
        + [{"a": ((2, 3), np.int32), "t": ((2, 2), object)}] * 3)  # fmt: skip
    assert not runs[0]["a"].any() and runs[0]["t"].tolist() == [["", ""]]
    assert runs[2]["t"].tolist() == [["", ""]] * 2 and runs[2]["a"].any()  # random_data: not all zeros
    assert len(list(_warm_up_inputs(spec, ()))) == 3  # onnxruntime: model_warmup alone, as Triton


def test_a_model_that_allows_padding_batches_rows_of_other_lengths_and_gets_its_own_back():
    fields, size = row_layout([("ids", (-1,), np.int64), ("t", (-1,), object)], dim_bound=8, bytes_room=64)
    spec = BatchSpec("ids", (-1,), {"y": (-1,)}, "int64", fields, True, (), True)
    arena = SlotArena.create(f"atoll-test-{secrets.token_hex(4)}", 2, size, 256)
    builder = BatchBuilder()
    try:
        rows = []
        for i, n in enumerate((5, 3)):
            arena.input(i, (n,), np.int64, 0)[...] = np.arange(1, n + 1)
            pack_bytes(["w"] * n, arena.input(i, (fields[1].room,), np.uint8, fields[1].offset))
            rows.append(Row(arena.name, i, (n,), ((n,),)))
        inputs, _ = builder.build(spec, tuple(rows), None, ())
        assert inputs["ids"].tolist() == [[1, 2, 3, 4, 5], [1, 2, 3, 0, 0]]  # zero-padded to the longest
        assert inputs["t"].tolist() == [["w"] * 5, ["w", "w", "w", "", ""]]
        layouts = builder.scatter(spec, tuple(rows), {"y": inputs["ids"].astype(np.float32) * 2}, None)
        assert [layout[0][2] for layout in layouts] == [(5,), (3,)]  # each row's outputs cut back to its length
        short = np.frombuffer(arena.output(1), np.float32, 3, layouts[1][0][3])
        assert short.tolist() == [2.0, 4.0, 6.0]
    finally:
        builder.close()
        arena.close()
