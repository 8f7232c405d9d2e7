"""Which node an inference request goes to: among the nodes whose index says its model is READY, the
one with the fewest requests this endpoint has outstanding there; a real-time request (Triton
priority 1) the one with the fewest real-time requests outstanding, so it skips the node whose
real-time queue is longest. Ties go round the tied nodes in turn, so that a client sending one
request at a time still reaches every node. Pure: the endpoint counts, this decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Outstanding:
    """Requests forwarded to one node and not yet answered: all of them, and the real-time ones."""

    total: int = 0
    real_time: int = 0


class Router:
    """The outstanding requests per node and the choice among candidates."""

    def __init__(self):
        self.outstanding: dict[str, Outstanding] = {}
        self._turn = 0

    def choose(self, candidates: Sequence[str], real_time: bool) -> str | None:
        """The node to send to among `candidates` (names), None when there is none."""
        if len(candidates) < 2:
            return candidates[0] if candidates else None
        empty = Outstanding()
        keys = []
        for name in candidates:
            o = self.outstanding.get(name, empty)
            keys.append((o.real_time, o.total) if real_time else o.total)
        best = min(keys)
        tied = [name for name, key in zip(candidates, keys) if key == best]
        self._turn += 1
        return tied[self._turn % len(tied)]

    def sent(self, name: str, real_time: bool) -> None:
        o = self.outstanding.setdefault(name, Outstanding())
        o.total += 1
        o.real_time += real_time

    def answered(self, name: str, real_time: bool) -> None:
        o = self.outstanding[name]
        o.total -= 1
        o.real_time -= real_time


def real_time(parameters: dict) -> bool:
    """Whether a request's parameters ask for real-time service: Triton's `priority` 1 (the highest
    level). The model's `default_priority_level` is the node's to apply: here such a request is
    routed as best-effort."""
    level = parameters.get("priority")
    return type(level) is int and level == 1
