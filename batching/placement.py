"""Placement of batches on vGPUs: an idle vGPU first, else the earliest expected completion.

The pool keeps, per vGPU, the expected service time of every batch dispatched to it and not yet
completed (a vGPU runs its batches one at a time, in dispatch order). Expected times come from the
injected `service_time(model, batch, length, vgpu_kind)`; `complete()` re-anchors the vGPU's queue on
the real completion time, so an early or late batch corrects every estimate behind it.
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
    expected: deque[float] = field(default_factory=deque)
    # when the head batch started (busy), or when the vGPU went idle
    since: float = float("-inf")

    def free_at(self) -> float:
        return self.since + sum(self.expected) if self.expected else self.since


class VgpuPlacement:
    def __init__(self, vgpus: Mapping[str, str], service_time: ServiceTime):
        """`vgpus` maps vGPU id -> kind (e.g. "a100-1g.5gb"), in preference order."""
        if not vgpus:
            raise ValueError("a batcher needs at least one vGPU")
        self._vgpus = {name: _Vgpu(kind, i) for i, (name, kind) in enumerate(vgpus.items())}
        self._service_time = service_time

    @property
    def names(self) -> list[str]:
        return list(self._vgpus)

    def idle(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if not self._vgpus[n].expected]

    def place(self, model: str, batch: int, pad_length: float, now: float,
              names: Iterable[str]) -> str:
        """Choose a vGPU among `names` for this batch and record its expected service time.

        Idle vGPUs win, the one finishing this batch soonest (its kind's service time), then the one
        idle longest; otherwise the busy vGPU whose queued work completes earliest.
        """
        named = [(n, self._vgpus[n]) for n in names]
        if not named:
            raise ValueError(f"model {model!r} has no vGPU to run on")
        idle = [(n, v) for n, v in named if not v.expected]
        if idle:
            name, vgpu = min(
                idle,
                key=lambda nv: (self._service_time(model, batch, pad_length, nv[1].kind),
                                nv[1].since, nv[1].order),
            )
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
