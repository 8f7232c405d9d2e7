"""Run-time enforcement of the real-time guarantee (DART's demotion), pure: time is passed in.

The admission test (`scheduler.rt_analysis`) holds only while every admitted model stays within
what it declared: its arrival envelope and its profiled WCETs. `RtGuard` keeps it so:

- a row beyond its model's envelope (its token bucket is empty) is demoted to best-effort, or
  refused, by policy, so the rows that stay real-time never exceed `burst + floor(d * rate)` in
  any window d, the count the analysis assumed;
- a model whose real-time batches ran longer than their budget (the profiled WCET for that batch,
  plus the blocking the analysis allows) `strikes` times in a row has broken the analysis'
  premise: from then on its rows are demoted (or refused) until it is profiled and loaded anew
  (`reset`). One overrun alone is not enough on a shared machine, where a preempted core makes a
  single run long now and then (the bound's slack absorbs it); a program that outgrew its profile
  overruns every time. The others keep their guarantee: after the strikes, the overrunning model
  sends nothing more as real-time work.

It also keeps, per model, the worst real-time response observed beside the bound.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from scheduler.rt_analysis import Envelope


class Verdict(enum.Enum):
    RT = "rt"  # within its envelope: runs as real-time work
    DEMOTE = "demote"  # runs as best-effort work
    REFUSE = "refuse"  # answered with an error


class Reason(enum.Enum):
    ENVELOPE = "envelope"  # beyond its declared arrival envelope
    OVERRUN = "overrun"  # its model overran its profiled WCET


ON_VIOLATION = ("demote", "refuse")


class TokenBucket:
    """`burst` tokens at most, refilled at `rate_per_s`; a row takes one token."""

    def __init__(self, envelope: Envelope, now: float):
        self.envelope = envelope
        self._tokens = float(envelope.burst)
        self._at = now

    def take(self, now: float, rows: int = 1) -> bool:
        e = self.envelope
        self._tokens = min(float(e.burst), self._tokens + max(0.0, now - self._at) * e.rate_per_s)
        self._at = max(self._at, now)
        if self._tokens + 1e-9 < rows:
            return False
        self._tokens -= rows
        return True


@dataclass
class ModelGuard:
    envelope: Envelope
    budget_s: dict[int, float]  # batch size -> the longest a real-time batch may run
    on_violation: str = "demote"
    bound_s: float | None = None
    bucket: TokenBucket | None = None
    overran: bool = False
    strikes: int = 0  # consecutive overruns
    worst_s: float = 0.0  # worst real-time response observed
    demoted: dict[Reason, int] = field(default_factory=lambda: dict.fromkeys(Reason, 0))


class RtGuard:
    """Per declared real-time model: its bucket, its WCETs, what it did. Models it does not know
    (no declared envelope) pass as real-time unchecked: their priority alone made them so."""

    def __init__(self, strikes: int = 3):
        self.strikes = strikes
        self.models: dict[str, ModelGuard] = {}

    def declare(self, model: str, envelope: Envelope, budget_s: dict[int, float],
                on_violation: str = "demote", bound_s: float | None = None) -> None:
        if on_violation not in ON_VIOLATION:
            raise ValueError(f"on_violation must be one of {', '.join(ON_VIOLATION)}, not {on_violation!r}")
        self.models[model] = ModelGuard(envelope, dict(budget_s), on_violation, bound_s)

    def forget(self, model: str) -> None:
        self.models.pop(model, None)

    def reset(self, model: str) -> None:
        """Trust the model again (it was profiled and loaded anew)."""
        if model in self.models:
            self.models[model].overran = False

    def classify(self, model: str, rows: int, now: float) -> tuple[Verdict, Reason | None]:
        g = self.models.get(model)
        if g is None:
            return Verdict.RT, None
        if g.bucket is None:  # the first row starts the bucket full
            g.bucket = TokenBucket(g.envelope, now)
        if g.overran:
            reason = Reason.OVERRUN
        elif g.bucket.take(now, rows):
            return Verdict.RT, None
        else:
            reason = Reason.ENVELOPE
        g.demoted[reason] += rows
        return (Verdict.REFUSE if g.on_violation == "refuse" else Verdict.DEMOTE), reason

    def ran(self, model: str, batch: int, execution_s: float) -> bool:
        """A real-time batch of `model` ran for `execution_s`, against its budget at the smallest
        budgeted batch that holds it; True once the model is demoted for overrunning."""
        g = self.models.get(model)
        if g is None or not g.budget_s:
            return False
        fits = [b for b in g.budget_s if b >= batch]
        largest = max(g.budget_s)  # beyond the profiled batches: its WCET scaled by the rows
        budget = g.budget_s[min(fits)] if fits else g.budget_s[largest] * batch / largest
        g.strikes = g.strikes + 1 if execution_s > budget else 0
        if g.strikes >= self.strikes:
            g.overran = True
        return g.overran

    def responded(self, model: str, response_s: float) -> None:
        g = self.models.get(model)
        if g is not None:
            g.worst_s = max(g.worst_s, response_s)
