"""REEF's padding where the device pads in software (CPU vGPUs): each client's kernels profiled at
load, a table per (RT client, BE client) of the launch pairs the rules allow, tabulated before
traffic, and per RT task a plan of which BE kernels run beside which RT kernel
(`scheduler.padding` holds the rules themselves)."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from scheduler.device import Kernel
from scheduler.padding import pair_table, plan_padding
from scheduler.profiler import KernelProfile, profile_program
from scheduler.task import BE, RT, Task


class PadPlanner:
    def __init__(self, device: Any, profile_reps: int):
        self._device = device
        self._reps = profile_reps
        self._tables: dict[tuple[str, str], np.ndarray] = {}  # (RT client, BE client) -> paddable

    def profile(self, program: Any, state: Any) -> list[KernelProfile]:
        zeros = {name: np.zeros(program.buffers[i].shape, program.buffers[i].dtype)
                 for name, i in program.inputs.items()}
        self._device.set_inputs(state, zeros)
        return profile_program(program, lambda i: self._device.time_launch(state, i),
                               self._device.limits, self._reps, self._device.resources)

    def prepare(self, clients: Iterable[Any]) -> None:
        """`clients`: the scheduler's (name, priority, profiles), all of them so far."""
        clients = list(clients)
        same_block = self._device.padding_rules.same_block
        for rt in (c for c in clients if c.priority == RT):
            for be in (c for c in clients if c.priority == BE):
                self._tables[(rt.name, be.name)] = pair_table(rt.profiles, be.profiles, same_block)

    def plan(self, rt: Any, first: int, running: Sequence[Task],
             clients: dict[str, Any]) -> list[list[Kernel]]:
        """Pads for RT client `rt`'s kernels first.. (a list per kernel) from the `running` BE tasks
        (their clients' profiles in `clients`); advances each chosen BE task."""
        tables = self._tables

        def paddable(r, t, i):
            table = tables.get((rt.name, t.client))
            return table is not None and bool(table[r + first, i])

        be = [(t, clients[t.client].profiles) for t in running]
        return plan_padding(rt.profiles[first:], be, self._device.padding_rules,
                            paddable if tables else None)  # not prepared: the rules alone
