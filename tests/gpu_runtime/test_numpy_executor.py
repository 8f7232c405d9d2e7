"""Importer + NumPy executor against onnxruntime (the reference) on every zoo model, and the guard."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_runtime.compiler.importer import import_model
from gpu_runtime.executors.numpy_executor import NumpyExecutor
from gpu_runtime.model_check import TOLERANCES
from tests.gpu_runtime.zoo_cases import CASES, input_for, onnxruntime_outputs, zoo_model


@pytest.mark.parametrize("name,batch,length", CASES)
def test_zoo_model_matches_onnxruntime(name, batch, length):
    program = import_model(zoo_model(name), batch, length)
    feeds = input_for(name, batch, length)
    ex = NumpyExecutor()
    got = ex.run(ex.load(program), feeds)
    want = onnxruntime_outputs(name, feeds)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key].shape == want[key].shape
        err = np.abs(got[key] - want[key]).max() / np.abs(want[key]).max()
        assert err < 1e-4, f"{name} b{batch}: relative error {err:.2e}"


@pytest.mark.parametrize("name,length", [("mobilenet_v3_small", None), ("conformer", 64)])
def test_fp16_program_is_within_the_fp16_tolerance(name, length):
    """fp16 storage (emulated: fp32 arithmetic, fp16 rounding at every buffer) against the fp32
    reference: a real fp16 error, inside `atoll model check`'s fp16 tolerance."""
    program = import_model(zoo_model(name), 1, length, precision="fp16")
    assert "float16" in {b.dtype for b in program.buffers if b.role in ("weight", "temp")}
    assert all(program.buffers[i].dtype == "float32" for i in program.inputs.values())
    assert all(program.buffers[i].dtype == "float32" for i in program.outputs.values())
    feeds = input_for(name, 1, length)
    ex = NumpyExecutor()
    got = ex.run(ex.load(program), feeds)
    for key, want in onnxruntime_outputs(name, feeds).items():
        err = np.abs(got[key] - want).max() / np.abs(want).max()
        assert 1e-5 < err < TOLERANCES["fp16"], f"{name}: relative error {err:.2e}"


def test_set_flag_makes_launches_no_ops():
    program = import_model(zoo_model("squeezenet1_1"), 1)
    ex = NumpyExecutor()
    state = ex.load(program)
    ex.set_inputs(state, input_for("squeezenet1_1", 1, None))
    state.flag.set()
    before = [v.copy() for v in state.views]
    for i in range(len(program.launches)):
        ex.launch(state, i)
    assert state.completed == 0
    assert all(np.array_equal(a, b) for a, b in zip(before, state.views))


def test_preempted_and_restored_run_is_bit_identical():
    """Preempt mid-program (flag set, later launches skipped), restore from the last completed
    launch: outputs equal an unpreempted run bit for bit (ARCHITECTURE §3)."""
    name = "mobilenet_v3_small"
    program = import_model(zoo_model(name), 2)
    feeds = input_for(name, 2, None)
    ex = NumpyExecutor()
    clean = ex.run(ex.load(program), feeds)
    state = ex.load(program)
    ex.set_inputs(state, feeds)
    stop = len(program.launches) // 2
    for i in range(stop):
        ex.launch(state, i)
    state.flag.set()
    for i in range(stop, stop + 3):  # in flight when preempted: they return without writing
        ex.launch(state, i)
    state.flag.clear()
    for i in range(state.completed - 2, len(program.launches)):  # restore re-runs a few launches
        ex.launch(state, i)
    out = ex.outputs(state)
    assert all(np.array_equal(out[k], clean[k]) for k in clean)


def test_input_shape_is_checked():
    program = import_model(zoo_model("squeezenet1_1"), 2)
    ex = NumpyExecutor()
    with pytest.raises(ValueError, match="expects"):
        ex.set_inputs(ex.load(program), input_for("squeezenet1_1", 1, None))
