"""Dynamic kernel padding: which BE kernels ride along with each RT kernel (REEF's two rules).

A BE kernel is a candidate for an RT kernel when it is shorter (it must not stretch the padded
launch) and its occupancy is not lower (its blocks must not hold SM resources longer than the RT
blocks they sit beside). Only a task's *next* kernel can be chosen, since its kernels depend on one
another; planning a whole RT task ahead chains a BE task's kernels over consecutive RT kernels,
which is safe because RT kernel i+1 starts only after padded launch i has ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from scheduler.device import Kernel
from scheduler.profiler import KernelProfile
from scheduler.task import Task


def is_candidate(rt: KernelProfile, be: KernelProfile, same_block: bool) -> bool:
    if same_block and be.block_threads != rt.block_threads:
        return False
    return be.duration_s < rt.duration_s and be.occupancy >= rt.occupancy


@dataclass(frozen=True)
class PaddingRules:
    max_pads: int = 1  # BE kernels per padded launch
    # CPU: pads run one after another on one spare thread, so their *sum* must fit under the RT
    # kernel. GPU: each pad gets its own blocks and runs beside the RT blocks.
    serial: bool = False
    same_block: bool = True  # the dispatcher runs every body with the RT kernel's block size


def plan_padding(rt_profiles: Sequence[KernelProfile],
                 be: Sequence[tuple[Task, Sequence[KernelProfile]]],
                 rules: PaddingRules,
                 paddable: Callable[[int, Task, int], bool] | None = None) -> list[list[Kernel]]:
    """Pads for every RT kernel; advances each chosen BE task's `next_launch` (it is in flight).
    `paddable(rt_index, task, be_index)` lets the device veto a pair it cannot launch padded
    right now (CUDA: no compiled dispatcher variant yet)."""
    plan: list[list[Kernel]] = []
    for r, rt in enumerate(rt_profiles):
        pads: list[Kernel] = []
        budget = rt.duration_s
        for task, profiles in be:
            if len(pads) >= rules.max_pads:
                break
            i = task.next_launch
            if i >= task.n_launches:
                continue
            cand = profiles[i]
            if not is_candidate(rt, cand, rules.same_block):
                continue
            if paddable is not None and not paddable(r, task, i):
                continue
            if rules.serial:
                if cand.duration_s >= budget:
                    continue
                budget -= cand.duration_s
            pads.append((task, i))
            task.next_launch = i + 1
        plan.append(pads)
    return plan


def pair_table(rt_profiles: Sequence[KernelProfile], be_profiles: Sequence[KernelProfile],
               same_block: bool) -> np.ndarray:
    """`is_candidate` for every (RT launch, BE launch) pair at once, vectorised (programs have
    hundreds of launches): a boolean matrix indexed [RT launch, BE launch]."""
    def columns(profiles):
        return (np.array([p.duration_s for p in profiles]), np.array([p.occupancy for p in profiles]),
                np.array([p.block_threads for p in profiles]))

    rd, ro, rb = columns(rt_profiles)
    bd, bo, bb = columns(be_profiles)
    ok = (bd[None, :] < rd[:, None]) & (bo[None, :] >= ro[:, None])
    if same_block:
        ok &= bb[None, :] == rb[:, None]
    return ok
