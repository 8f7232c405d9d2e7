"""DKP selection rules on synthetic profiles, and occupancy against the CUDA occupancy calculator's
formula (per-SM limits of compute capability 9.0 from NVIDIA's CUDA C Programming Guide)."""

import numpy as np
import pytest

from scheduler.padding import PaddingRules, is_candidate, pair_table, plan_padding
from scheduler.profiler import DeviceLimits, KernelProfile, occupancy
from scheduler.profiler import KernelProfile as P
from scheduler.task import BE, Task

# NVIDIA's published per-SM limits for compute capability 9.0 (H100/H200).
SM90 = DeviceLimits("sm_90", 2048, 32, 65536, 228 * 1024)


def prof(ms, occ=0.5, threads=256):
    return KernelProfile("k", ms * 1e-3, 10, threads, occ)


def be_task(n):
    return Task(0, BE, "c", {}, n, 4, 0.0)


@pytest.mark.parametrize("threads,regs,smem,expected", [
    (256, 32, 0, 1.0),           # 8 blocks x 8 warps fill 64 warps
    (256, 64, 0, 0.5),           # 16384 regs per block -> 4 blocks
    (128, 128, 0, 0.25),         # 16384 regs per block -> 4 blocks of 4 warps
    (256, 32, 100 * 1024, 0.25),  # 228 KiB / 100 KiB -> 2 blocks
    (32, 16, 0, 0.5),            # 32-block limit: 32 warps of 64
    (96, 40, 0, 51 / 64),        # 40 regs -> 1280/warp, 3840/block -> 17 blocks by regs (21 by threads)
])
def test_occupancy_matches_calculator(threads, regs, smem, expected):
    assert occupancy(threads, regs, smem, SM90) == pytest.approx(expected)


def test_candidate_rules():
    rt = prof(1.0, 0.5)
    assert is_candidate(rt, prof(0.5, 0.5), same_block=True)
    assert not is_candidate(rt, prof(1.5, 0.5), same_block=True)  # longer than the RT kernel
    assert not is_candidate(rt, prof(0.5, 0.25), same_block=True)  # lower occupancy
    assert is_candidate(rt, prof(0.5, 1.0), same_block=True)
    assert not is_candidate(rt, prof(0.5, 0.5, threads=128), same_block=True)
    assert is_candidate(rt, prof(0.5, 0.5, threads=128), same_block=False)


def test_plan_chains_a_task_over_consecutive_rt_kernels():
    t = be_task(5)
    t.next_launch = t.completed = 2
    plan = plan_padding([prof(1.0)] * 4, [(t, [prof(0.2)] * 5)], PaddingRules(max_pads=1))
    assert plan == [[(t, 2)], [(t, 3)], [(t, 4)], []]
    assert t.next_launch == 5


def test_plan_skips_kernels_that_break_a_rule_and_waits():
    t = be_task(3)
    profiles = [prof(0.2), prof(5.0), prof(0.2)]  # kernel 1 is too long for any RT kernel
    plan = plan_padding([prof(1.0)] * 3, [(t, profiles)], PaddingRules(max_pads=1))
    assert plan == [[(t, 0)], [], []]  # order is kept: kernel 2 may not overtake kernel 1


def test_serial_budget_on_cpu():
    a, b, c = be_task(2), be_task(2), be_task(2)
    rules = PaddingRules(max_pads=4, serial=True, same_block=False)
    plan = plan_padding([prof(1.0)], [(a, [prof(0.6)] * 2), (b, [prof(0.6)] * 2), (c, [prof(0.3)] * 2)], rules)
    assert plan == [[(a, 0), (c, 0)]]  # 0.6 + 0.3 < 1.0, adding b's 0.6 would not fit


def test_candidate_pairs_group_by_kernel_names():
    rt = [P("conv", 1e-3, 8, 256, 0.5), P("add", 1e-4, 8, 256, 0.5), P("conv", 2e-3, 8, 256, 0.5)]
    be = [P("relu", 5e-5, 8, 256, 1.0), P("conv", 5e-4, 8, 256, 0.5), P("relu", 5e-5, 8, 128, 1.0),
          P("relu", 5e-5, 8, 256, 0.25)]
    ok = pair_table(rt, be, same_block=True)
    found = {}
    for r, i in zip(*np.nonzero(ok)):
        found[(rt[r].name, be[i].name)] = found.get((rt[r].name, be[i].name), 0) + 1
    assert ok.sum() == 5
    # conv x relu: RT kernels 0 and 2 with BE kernel 0 (BE 2 has another block size, BE 3 a lower
    # occupancy); conv x conv: both RT convs are longer than BE 1; add x relu: BE 0.
    assert found == {("conv", "relu"): 2, ("conv", "conv"): 2, ("add", "relu"): 1}
