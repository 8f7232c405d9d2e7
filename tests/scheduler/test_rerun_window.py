"""Reset-based preemption re-runs kernels from the last completed one; these check that doing so
within the computed window reproduces the unpreempted outputs bit for bit (reference: the same
program run once straight through), and that the window is tight (one more kernel can break it)."""

import numpy as np
import pytest
from gpu_runtime.program import BufferRef, BufferSpec, Launch, Program
from scheduler.rerun_window import NotRestartable, rerun_window
from scheduler_fakes import DENSE, ArenaExecutor, dense_chain, run_alone


def _run_with_reset(program, inputs, reset_at, ran_ahead):
    """Run kernels 0..reset_at+ran_ahead-1, then restart from reset_at (what a reset does)."""
    ex = ArenaExecutor()
    state = ex.load(program)
    ex.set_inputs(state, inputs)
    for i in range(min(reset_at + ran_ahead, len(program.launches))):
        ex.launch(state, i)
    for i in range(reset_at, len(program.launches)):
        ex.launch(state, i)
    return ex.outputs(state)["y"]


@pytest.mark.parametrize("slots", [2, 3, 5])
def test_window_follows_slot_reuse(slots):
    # With k rotating slots, launch i reads slot (i-1)%k and launch i+k-1 overwrites it.
    assert rerun_window(dense_chain("m", 12, slots=slots)) == slots - 1


@pytest.mark.parametrize("slots", [2, 3, 4])
def test_restart_within_window_is_bit_identical(slots):
    program = dense_chain("m", 10, width=16, slots=slots, seed=3)
    x = {"x": np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)}
    ref = run_alone(program, x)["y"]
    window = rerun_window(program)
    for reset_at in range(len(program.launches)):
        for ahead in range(window + 1):
            np.testing.assert_array_equal(_run_with_reset(program, x, reset_at, ahead), ref)


def test_window_is_tight():
    program = dense_chain("m", 10, width=16, slots=3, seed=3)
    x = {"x": np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)}
    ref = run_alone(program, x)["y"]
    window = rerun_window(program)
    broken = [not np.array_equal(_run_with_reset(program, x, s, window + 1), ref) for s in range(1, 8)]
    assert any(broken)


def test_output_aliasing_its_input_is_not_restartable():
    buffers = [BufferSpec("x", (1, 4), "float32", 0, "input"),
               BufferSpec("w", (4, 4), "float32", 16, "weight"),
               BufferSpec("y", (1, 4), "float32", 0, "output")]  # planner put y on top of x
    launch = Launch(DENSE, (1, 1, 1), (4, 1, 1), (BufferRef(0), BufferRef(1), BufferRef(2)), (2,))
    with pytest.raises(NotRestartable):
        rerun_window(Program("inplace", 1, buffers, [launch], {"x": 0}, {"y": 2}, {}, 80))
