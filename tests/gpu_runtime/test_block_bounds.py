"""Bounded blocks: every kernel of the zoo at the batcher's shapes keeps each block's longest
stretch between preemption-flag checks under kernels.bounds.BOUND_US on the stated H100 model,
and the loops that now check the flag inside (grid-stride passes, long rows, SE rounds and spans)
compute what their NumPy references do, run on the CUDA emulator with several passes per block,
and write nothing when the flag is set."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_runtime import nvcc_check
from gpu_runtime.kernels import bounds
from gpu_runtime.kernels.elementwise import ewise, fill
from gpu_runtime.kernels.emulator import EmulatedKernel
from gpu_runtime.kernels.rows import rows_kernel
from gpu_runtime.kernels.se import SPAN, se
from gpu_runtime.program import BufferRef, Launch
from gpu_runtime.zoo import MODELS

RNG = np.random.default_rng(4)
FLAG_CLEAR, FLAG_SET = np.zeros(1, np.int32), np.ones(1, np.int32)


@pytest.mark.slow
def test_every_zoo_kernel_stays_under_the_bound():
    programs = nvcc_check.zoo_programs(list(MODELS), nvcc_check.BATCHES, ["fp32", "fp16"],
                                       (251, 1501, 3001))
    rows = bounds.report(programs)
    assert len(rows) > 300  # every family, both precisions
    assert {r.kernel.split("_")[1] for r in rows} >= {"gemm", "hmma", "gemmsum", "window", "ew",
                                                     "se", "mean", "softmax", "layernorm"}
    over = [(r.kernel, round(r.us, 1), r.where) for r in rows if r.us > bounds.BOUND_US]
    assert not over


def test_the_model_turns_a_stretch_into_time():
    """A pass of a 256-thread vector add moves 4 elements of 3 fp32 operands a thread: 12 KB and
    one round trip per block. Alone on its SM a block moves it at the SM's share of HBM (just
    over one round trip); once the grid covers the GPU 8 times over, 8 blocks share the SM."""
    k = ewise("add", "none", 1, (False,) * 3, "ccc", ("float32",) * 3)
    args = (BufferRef(0), BufferRef(1), BufferRef(2), 4096, 0, 1, 0, 1, 0, 1, 0.0, 0.0)
    few = Launch(k, (132, 1, 1), (256, 1, 1), args, (2,))
    many = Launch(k, (132 * 64, 1, 1), (256, 1, 1), args, (2,))
    assert bounds.resident(few) == 1 and bounds.resident(many) == 8
    one = 12288 * 132 / bounds.HBM_BYTES_S * 1e6
    assert one > bounds.LATENCY_S * 1e6
    assert bounds.longest_us(few) == pytest.approx(one)
    assert bounds.longest_us(many) == pytest.approx(8 * one)


def _run(kernel, grid, block, args, flag=FLAG_CLEAR):
    EmulatedKernel(kernel).launch(grid, block, [flag, *args])


def test_grid_stride_passes_cover_every_element_and_stop_on_the_flag():
    y = np.zeros(1000, np.float32)
    _run(fill(), (2, 1, 1), (64, 1, 1), [y, 1000, 2.5])  # 8 passes per block
    assert (y == 2.5).all()
    y[:] = 0
    _run(fill(), (2, 1, 1), (64, 1, 1), [y, 1000, 2.5], FLAG_SET)
    assert not y.any()
    k = ewise("relu", "none", 1, (False, False), None, ("float32", "float32"))
    x = RNG.standard_normal(999).astype(np.float32)
    got, want = np.zeros_like(x), np.zeros_like(x)
    args = [x, got, 999, 0, 1, 0, 1, 0.0, 0.0]
    _run(k, (3, 1, 1), (32, 1, 1), args)
    k.numpy_impl(x, want, *args[2:])
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("op", ["mean", "softmax", "layernorm"])
@pytest.mark.parametrize("shape,rows,L,inner", [("warp", 13, 40, 1), ("block", 3, 2500, 1),
                                                ("cols", 13 * 5, 37, 5)])
def test_rows_that_check_the_flag_inside_match_their_reference(op, shape, rows, L, inner):
    per = -(-L // 32) if shape == "warp" else 0
    k = rows_kernel(op, shape, per, ("float32",) * 3)
    outer = rows // inner
    x = RNG.standard_normal(outer * L * inner).astype(np.float32)
    g, b = RNG.standard_normal(L).astype(np.float32), RNG.standard_normal(L).astype(np.float32)
    size = outer * inner if op == "mean" else x.size
    got, want = np.full(size, np.nan, np.float32), np.zeros(size, np.float32)
    grid = {"warp": (-(-rows // 8), 1, 1), "block": (2, 1, 1), "cols": (1, 1, 1)}[shape]
    _run(k, grid, (256, 1, 1), [x, g, b, got, rows, L, inner, 1e-5])
    k.numpy_impl(x, g, b, want, rows, L, inner, 1e-5)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    untouched = np.full(size, np.nan, np.float32)
    _run(k, grid, (256, 1, 1), [x, g, b, untouched, rows, L, inner, 1e-5], FLAG_SET)
    assert np.isnan(untouched).all()


def test_se_over_long_channels_in_spans_matches_its_reference():
    k = se("relu", "sigmoid", ("float32",) * 3)
    n, C, Cs, T = 2, 40, 10, 2 * SPAN + 77  # three spans per channel, three rounds of channels
    p = RNG.standard_normal(n * C * T).astype(np.float32)
    w1, b1 = RNG.standard_normal(Cs * C).astype(np.float32), RNG.standard_normal(Cs).astype(np.float32)
    w2, b2 = RNG.standard_normal(C * Cs).astype(np.float32), RNG.standard_normal(C).astype(np.float32)
    got, want = np.zeros(n * C, np.float32), np.zeros(n * C, np.float32)
    args = [p, w1, b1, w2, b2]
    _run(k, (n, 1, 1), (512, 1, 1), [*args, got, C, Cs, T, T])
    k.numpy_impl(*args, want, C, Cs, T, T)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
