"""Arena planning: dead buffers are reused, live ones never share bytes (also on zoo programs)."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_runtime.compiler.arena import ALIGN, Lifetime, chunked, plan
from gpu_runtime.compiler.importer import import_model
from gpu_runtime.executors.numpy_executor import NumpyExecutor
from gpu_runtime.program import BufferRef
from tests.gpu_runtime.zoo_cases import input_for, zoo_model


def _assert_no_live_overlap(lifetimes, offsets):
    for i, a in enumerate(lifetimes):
        for b in lifetimes[i + 1:]:
            if a.overlaps(b):
                ea, eb = offsets[a.key] + a.nbytes, offsets[b.key] + b.nbytes
                assert ea <= offsets[b.key] or eb <= offsets[a.key], (a, b)


def test_dead_buffers_are_reused():
    lts = [Lifetime(0, 1000, 0, 1), Lifetime(1, 1000, 2, 3), Lifetime(2, 1000, 4, 5)]
    offsets, total = plan(lts)
    assert len(set(offsets.values())) == 1
    assert total == 1024


def test_live_buffers_never_alias_random_lifetimes():
    rng = np.random.default_rng(0)
    lts = []
    for k in range(300):
        first = int(rng.integers(0, 200))
        lts.append(Lifetime(k, int(rng.integers(1, 50_000)), first, first + int(rng.integers(0, 30))))
    offsets, total = plan(lts)
    assert all(o % ALIGN == 0 for o in offsets.values())
    _assert_no_live_overlap(lts, offsets)
    assert total < sum(lt.nbytes for lt in lts) / 2  # and reuse is substantial
    peak = max(sum(lt.nbytes for lt in lts if lt.first <= t <= lt.last) for t in range(230))
    assert total >= peak


@pytest.mark.parametrize("name,length", [("mobilenet_v3_small", None), ("swin_t", None),
                                         ("conformer", 120)])
def test_zoo_programs_never_alias_live_buffers(name, length):
    program = import_model(zoo_model(name), 2, length)
    n = len(program.launches)
    first, last = {}, {}
    for i, launch in enumerate(program.launches):
        for a in launch.args:
            if isinstance(a, BufferRef):
                first.setdefault(a.index, i)
                last[a.index] = i
    root = {i: (s.alias_of if s.alias_of is not None else i) for i, s in enumerate(program.buffers)}
    spans = {}
    for idx in first:
        r = root[idx]
        lo, hi = spans.get(r, (first[idx], last[idx]))
        spans[r] = (min(lo, first[idx]), max(hi, last[idx]))
    lts = []
    for r, (lo, hi) in spans.items():
        spec = program.buffers[r]
        if spec.role == "weight":
            continue
        lo = -1 if spec.role == "input" else lo
        hi = n if spec.role in ("input", "output") or program.buffers[r].name in program.outputs \
            else hi + program.restore_window
        lts.append(Lifetime(r, spec.nbytes, lo, hi))
    _assert_no_live_overlap(lts, {lt.key: program.buffers[lt.key].offset for lt in lts})
    temps = sum(s.nbytes for s in program.buffers if s.role == "temp")
    assert program.arena_bytes < temps / 2
    assert set(program.kernels()) == {launch.kernel.name for launch in program.launches}


def test_inputs_are_checked_before_any_write():
    program = import_model(zoo_model("squeezenet1_1"), batch=2)
    ex = NumpyExecutor()
    state = ex.load(program)
    with pytest.raises(KeyError, match="missing input 'input'"):
        ex.set_inputs(state, {})
    with pytest.raises(ValueError, match=r"shape \(1, 3, 224, 224\), program expects \(2, 3, 224, 224\)"):
        ex.set_inputs(state, {"input": np.zeros((1, 3, 224, 224), np.float64)})
    [(index, value)] = program.checked_inputs({"input": np.ones((2, 3, 224, 224), np.float64)})
    assert index == program.inputs["input"] and value.dtype == np.float32 and value.flags.c_contiguous


def _restart_every_chunk(program, chunks, feeds, rng):
    """Run each chunk partly (a random prefix), then the whole chunk from its start, as a
    preempted BE task does; returns the outputs."""
    ex = NumpyExecutor()
    state = ex.load(program)
    ex.set_inputs(state, feeds)
    for start, end in chunks:
        for i in range(start, start + int(rng.integers(0, end - start + 1))):
            ex.launch(state, i)
        for i in range(start, end):
            ex.launch(state, i)
    return ex.outputs(state)


@pytest.mark.parametrize("name,length", [("mobilenet_v3_small", None), ("conformer", 48)])
def test_chunked_plan_makes_every_chunk_restartable(name, length):
    """Reference: the same program run once straight through. A chunk re-run from its start must
    find every buffer it reads as it was, on the chunk-aware plan (bit-identical outputs); the
    importer's tight plan is not enough for chunks this long (the check has teeth)."""
    program = import_model(zoo_model(name), 1, length)
    feeds = input_for(name, 1, length)
    clean = NumpyExecutor().run(NumpyExecutor().load(program), feeds)
    n = len(program.launches)
    cuts = list(range(0, n, 12)) + [n]
    chunks = list(zip(cuts[:-1], cuts[1:]))
    planned = chunked(program, chunks)
    assert planned.weight_bytes == program.weight_bytes and planned.arena_bytes >= program.arena_bytes
    for seed in range(3):
        got = _restart_every_chunk(planned, chunks, feeds, np.random.default_rng(seed))
        assert all(np.array_equal(got[k], clean[k]) for k in clean)
    tight = [_restart_every_chunk(program, chunks, feeds, np.random.default_rng(s)) for s in range(3)]
    assert any(not np.array_equal(t[k], clean[k]) for t in tight for k in clean)


def test_chunks_must_cover_the_program_in_order():
    program = import_model(zoo_model("squeezenet1_1"), 1)
    n = len(program.launches)
    for bad in ([(0, n - 1)], [(0, 5), (6, n)], [(5, n), (0, 5)], [(0, n + 1)]):
        with pytest.raises(ValueError):
            chunked(program, bad)
