"""Which node an inference request goes to: among the nodes whose index says its model is READY, the
one with the fewest requests this endpoint has outstanding there; a real-time request (Triton
priority 1) the one with the fewest real-time requests outstanding, so it skips the node whose
real-time queue is longest. Ties go round the tied nodes in turn, so that a client sending one
request at a time still reaches every node. The endpoint tells the router what it sent and what was
answered; the native relay chooses a best-effort request's first try the same way in C, from the
same counts (`Router.count_with`, cluster/native/routes.h).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Outstanding:
    """Requests forwarded to one node and not yet answered: all of them, and the real-time ones."""

    total: int = 0
    real_time: int = 0


class Counts:
    """The requests out per node, kept in Python. The native relay's `_relay.Routing` has the same
    methods and is counted without the GIL by its threads (`Router.count_with`)."""

    def __init__(self):
        self._out: dict[str, Outstanding] = {}

    def of(self, name: str) -> tuple[int, int]:
        o = self._out.get(name)
        return (0, 0) if o is None else (o.total, o.real_time)

    def sent(self, name: str, real_time: bool) -> None:
        o = self._out.setdefault(name, Outstanding())
        o.total += 1
        o.real_time += real_time

    def answered(self, name: str, real_time: bool) -> None:
        o = self._out[name]
        o.total -= 1
        o.real_time -= real_time

    def snapshot(self) -> dict[str, tuple[int, int]]:
        return {name: (o.total, o.real_time) for name, o in list(self._out.items())}


class Router:
    """The outstanding requests per node and the choice among candidates."""

    def __init__(self):
        self.counts = Counts()
        self._turn = 0

    def count_with(self, counts) -> None:
        """Count with `counts` (`Counts`' methods) from now on: the native relay's, which its threads
        also choose with. Only while no request is out."""
        if any(total for total, _ in self.counts.snapshot().values()):
            raise RuntimeError("the router's counts are replaced while requests are out")
        self.counts = counts

    def choose(self, candidates: Sequence[str], real_time: bool) -> str | None:
        """The node to send to among `candidates` (names), None when there is none."""
        if len(candidates) < 2:
            return candidates[0] if candidates else None
        keys = []
        for name in candidates:
            total, rt = self.counts.of(name)
            keys.append((rt, total) if real_time else total)
        best = min(keys)
        tied = [name for name, key in zip(candidates, keys) if key == best]
        self._turn += 1
        return tied[self._turn % len(tied)]

    def sent(self, name: str, real_time: bool) -> None:
        self.counts.sent(name, real_time)

    def answered(self, name: str, real_time: bool) -> None:
        self.counts.answered(name, real_time)

    def outstanding(self) -> dict[str, Outstanding]:
        """Every node counted, with its requests out."""
        return {name: Outstanding(total, rt) for name, (total, rt) in self.counts.snapshot().items()}


def real_time(parameters: dict) -> bool:
    """Whether a request's parameters ask for real-time service: Triton's `priority` 1 (the highest
    level). The model's `default_priority_level` is the node's to apply: here such a request is
    routed as best-effort."""
    level = parameters.get("priority")
    return type(level) is int and level == 1
