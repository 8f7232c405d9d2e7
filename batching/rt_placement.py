"""Placement of real-time batches: they skip the buckets and go out at once.

An RT request (Triton priority 1) is latency-critical, so it is never held back to fill a batch: its
rows form one batch, placed the moment it arrives. A vGPU runs RT tasks one at a time (REEF), so the
batch goes to the vGPU with the fewest RT batches in flight; on a tie, to the one with the least
other work in flight (a vGPU that cannot preempt makes the RT batch wait for its running batch), then
in preference order. BE batches keep their own placement (`placement.VgpuPlacement`); a BE batch preempted by RT
work simply completes later, and `complete()` there re-anchors on the real time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class RtPlacement:
    def __init__(self, vgpus: Iterable[str]):
        self._in_flight = {name: 0 for name in vgpus}
        if not self._in_flight:
            raise ValueError("RT placement needs at least one vGPU")

    def in_flight(self, name: str) -> int:
        return self._in_flight[name]

    def place(self, names: Iterable[str] | None = None, load: Mapping[str, int] | None = None) -> str:
        """Choose among `names` (default: every vGPU) and count the batch as in flight there;
        `load` is each vGPU's other work in flight (batches), for ties."""
        order = {name: i for i, name in enumerate(self._in_flight)}
        candidates = list(self._in_flight if names is None else names)
        unknown = [n for n in candidates if n not in order]
        if unknown or not candidates:
            raise ValueError(f"no RT placement among {candidates} (unknown: {unknown})")
        load = load or {}
        name = min(candidates, key=lambda n: (self._in_flight[n], load.get(n, 0), order[n]))
        self._in_flight[name] += 1
        return name

    def complete(self, name: str) -> None:
        if self._in_flight.get(name, 0) <= 0:
            raise ValueError(f"vGPU {name!r} completed an RT batch but had none in flight")
        self._in_flight[name] -= 1
