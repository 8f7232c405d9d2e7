"""Placement of batches on vGPUs: an idle vGPU first, else the earliest expected completion.

The pool keeps, per vGPU, the expected service time of every batch dispatched to it and not yet
completed. A vGPU runs `slots` batches at once (1 for a GPU slice; a CPU vGPU runs one per core),
in dispatch order; it is idle while it has a free slot. Expected times come from the injected
`service_time(model, batch, length, vgpu_kind)`; `complete()` re-anchors the vGPU's queue on the real
completion time, so an early or late batch corrects every estimate behind it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

ServiceTime = Callable[[str, int, float, str], float]


@dataclass
class _Vgpu:
    kind: str
    order: int
    slots: int = 1
    expected: deque[float] = field(default_factory=deque)
    # when the head batch started (busy), or when the vGPU went idle
    since: float = float("-inf")

    def free_at(self) -> float:
        """When a slot frees, if its queued work spreads evenly over the slots."""
        return self.since + sum(self.expected) / self.slots if self.expected else self.since

    @property
    def has_room(self) -> bool:
        return len(self.expected) < self.slots


class VgpuPlacement:
    def __init__(self, vgpus: Mapping[str, str], service_time: ServiceTime,
                 slots: Mapping[str, int] | None = None):
        """`vgpus` maps vGPU id -> kind (e.g. "a100-1g.5gb"), in preference order; `slots`, vGPU
        id -> batches it runs at once (default 1)."""
        if not vgpus:
            raise ValueError("a batcher needs at least one vGPU")
        slots = slots or {}
        self._vgpus = {name: _Vgpu(kind, i, max(1, slots.get(name, 1)))
                       for i, (name, kind) in enumerate(vgpus.items())}  # fmt: skip
        self._service_time = service_time

    @property
    def names(self) -> list[str]:
        return list(self._vgpus)

    def idle(self, names: Iterable[str]) -> list[str]:
        """The vGPUs among `names` with a free slot."""
        return [n for n in names if self._vgpus[n].has_room]

    def place(self, model: str, batch: int, pad_length: float, now: float,
              names: Iterable[str]) -> str:
        """Choose a vGPU among `names` for this batch and record its expected service time.

        Idle vGPUs win, the one finishing this batch soonest (its kind's service time), then the one
        idle longest; otherwise the busy vGPU whose queued work completes earliest.
        """
        named = [(n, self._vgpus[n]) for n in names]
        if not named:
            raise ValueError(f"model {model!r} has no vGPU to run on")
        idle = [(n, v) for n, v in named if v.has_room]
        if idle:
            name, vgpu = min(
                idle,
                key=lambda nv: (self._service_time(model, batch, pad_length, nv[1].kind),
                                len(nv[1].expected), nv[1].since, nv[1].order),
            )
            if not vgpu.expected:
                vgpu.since = now
        else:
            name, vgpu = min(named, key=lambda nv: (nv[1].free_at(), nv[1].order))
        vgpu.expected.append(self._service_time(model, batch, pad_length, vgpu.kind))
        return name

    def complete(self, name: str, now: float) -> None:
        vgpu = self._vgpus.get(name)
        if vgpu is None:
            raise ValueError(f"unknown vGPU {name!r}")
        if not vgpu.expected:
            raise ValueError(f"vGPU {name!r} completed a batch but had none outstanding")
        vgpu.expected.popleft()
        vgpu.since = now
