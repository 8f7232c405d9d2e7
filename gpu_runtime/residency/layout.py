"""A model's weights as residency moves them: one host image (every weight at its planned offset
in the model's weight region, so one range copy moves many weights), the layer groups as byte
ranges of it, and for each program the group each launch must wait for.

Programs of one model at every batch size share the weight layout (`Program.weight_bytes`, the
weights at the same offsets), so one image and one grouping serve all of them. `rebind` points a
loaded state's weight buffers at a new place (the pool, or the host image while not resident)
without touching its arena: the executors' states keep views per buffer and launch arguments with
those views in place (after any prefix the executor adds, such as the guard flag).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_runtime.program import BufferRef, Program
from gpu_runtime.residency.grouping import plan_groups


def weight_ranges(program: Program) -> dict[int, tuple[int, int]]:
    """buffer index -> (offset, end) in the weight region, for every weight buffer with data."""
    return {i: (b.offset, b.offset + b.nbytes) for i, b in enumerate(program.buffers)
            if b.role == "weight" and i in program.weights}


def first_use_bytes(program: Program) -> list[int]:
    """Per launch, the weight bytes no earlier launch read (what must arrive before it runs)."""
    ranges = weight_ranges(program)
    seen: set[int] = set()
    out = []
    for launch in program.launches:
        new = 0
        for a in launch.args:
            if isinstance(a, BufferRef) and a.index in ranges and a.index not in seen:
                seen.add(a.index)
                new += ranges[a.index][1] - ranges[a.index][0]
        out.append(new)
    return out


def host_image(program: Program, allocate=None) -> np.ndarray:
    """The weight region as bytes, each weight at its offset; `allocate(n)` gives the byte array
    (pinned host memory on GPUs), else an ordinary NumPy one."""
    image = allocate(max(program.weight_bytes, 1)) if allocate else np.zeros(max(program.weight_bytes, 1), np.uint8)
    for i, (a, b) in weight_ranges(program).items():
        spec = program.buffers[i]
        image[a:b] = np.ascontiguousarray(program.weights[i], spec.dtype).reshape(-1).view(np.uint8)
    return image


@dataclass(frozen=True)
class Groups:
    """Layer groups: `ranges[g]` the coalesced byte ranges group g moves; `of_buffer` the group of
    each weight buffer (by index in the planning program, keyed by its offset for the others)."""

    ranges: tuple[tuple[tuple[int, int], ...], ...]
    of_offset: dict[int, int]

    def __len__(self) -> int:
        return len(self.ranges)

    def need(self, program: Program) -> list[int]:
        """Per launch of `program`, how many groups must have arrived before it starts (never
        fewer than for an earlier launch: launches run in order)."""
        ranges = weight_ranges(program)
        out, need = [], 1
        for launch in program.launches:
            for a in launch.args:
                if isinstance(a, BufferRef) and a.index in ranges:
                    need = max(need, self.of_offset[ranges[a.index][0]] + 1)
            out.append(need)
        return out


def make_groups(program: Program, exec_s: list[float], bandwidth: float, overhead_s: float) -> Groups:
    """PipeSwitch's grouping of `program`'s launches (`grouping.plan_groups`), as byte ranges."""
    new = first_use_bytes(program)
    starts = plan_groups(new, exec_s, bandwidth, overhead_s)
    bounds = [*starts, len(program.launches)]
    group_of_launch = np.repeat(np.arange(len(starts)), np.diff(bounds))
    ranges = weight_ranges(program)
    per_group: list[list[tuple[int, int]]] = [[] for _ in starts]
    of_offset: dict[int, int] = {}
    for index, launch in enumerate(program.launches):
        for a in launch.args:
            if isinstance(a, BufferRef) and a.index in ranges and ranges[a.index][0] not in of_offset:
                of_offset[ranges[a.index][0]] = int(group_of_launch[index])
                per_group[int(group_of_launch[index])].append(ranges[a.index])
    for a, b in ranges.values():  # weights no launch reads (none in practice): the last group
        if a not in of_offset:
            of_offset[a] = len(starts) - 1
            per_group[-1].append((a, b))
    return Groups(tuple(_coalesce(r) for r in per_group), of_offset)


def _coalesce(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def rebind(state: Any, region: Any) -> None:
    """Point `state`'s weight buffers at `region` (a byte array holding the weight image at the
    planned offsets: a pool slice or the host image); arena buffers and scalars stay."""
    program = state.program
    views = state.views
    if getattr(state, "weights", None) is not None:
        state.weights = None  # the executor's own copy (a `device_memory` region) goes with its last user
    for i, spec in enumerate(program.buffers):
        if spec.role == "weight":
            views[i] = region[spec.offset:spec.offset + spec.nbytes].view(spec.dtype).reshape(spec.shape)
    for k, launch in enumerate(program.launches):
        old = state.args[k]
        prefix = len(old) - len(launch.args)  # the executor's own leading arguments (the flag)
        state.args[k] = (*old[:prefix], *(views[a.index] if isinstance(a, BufferRef) else old[prefix + j]
                                          for j, a in enumerate(launch.args)))
