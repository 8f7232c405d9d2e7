"""Admission: refuse a request at once (503, Retry-After) when it could not be answered in time.

A front end knows how many requests of a priority it holds (`in_flight`) and how fast it answers
them while it has any (`rate`, per second of busy time). By Little's law a new request waits about
`in_flight / rate`; it is admitted while that is at most `WAIT_SHARE` of the request timeout, so the
bound follows from the timeout and what the server is measured to do, not from a constant: what is
admitted is answered in time, the rest refused before any work is spent on it. Why a tenth (a deeper
queue answers slower, not more): docs/robustness.md. `cap` (> 0) is a fixed bound on top.

The measure forgets with a half-life of `HALF_LIFE_S` seconds of busy time, not of the clock: idle
time says nothing of the rate, so a burst after idle is judged on the last busy period's, which its
first slow answers (another process still holding the cores) dilute instead of replacing
(docs/robustness.md). Nor does a small sample refuse: the wait is estimated as if at least `SAMPLE`
answers had come in the busy time measured, so a fresh server's first slow answers refuse nothing,
while one that stops answering is still refused once its busy time says even `SAMPLE` answers would
be too slow. Nothing is refused before the first answer, nor while fewer than `FLOOR` are in flight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HALF_LIFE_S = 2.0
WAIT_SHARE = 0.1  # of the timeout, for waiting: the rest is for the request's own work and noise
FLOOR = 8
SAMPLE = 16  # answers: fewer are not a sample to refuse on (a rate read from them is raised to it)


@dataclass(frozen=True)
class Refusal:
    reason: str
    retry_after_s: int


class Admission:
    """One priority's admission in one front end; every call passes the time (seconds)."""

    def __init__(self, timeout_s: float, cap: int = 0):
        self.timeout_s = timeout_s
        self.cap = cap
        self.in_flight = 0
        self._answered = 0.0  # count of answers, decayed per busy second
        self._busy_s = 0.0  # seconds with requests in flight, decayed per busy second
        self._t = 0.0

    @property
    def rate(self) -> float | None:
        """Answers per busy second (None before the first)."""
        return self._answered / self._busy_s if self._answered and self._busy_s > 0 else None

    def refuse(self, now: float) -> Refusal | None:
        """Why a request arriving now is refused, or None to admit it (then call `started`)."""
        self._advance(now)
        n = self.in_flight
        if self.cap and n >= self.cap:
            return Refusal(f"overloaded: {n} requests in flight (server.max_pending_requests)", 1)
        if n < FLOOR or self.rate is None:
            return None
        wait = n * self._busy_s / max(self._answered, SAMPLE)
        allowed = WAIT_SHARE * self.timeout_s
        if wait <= allowed:
            return None
        return Refusal(f"overloaded: {n} requests in flight would wait about {wait:.1f} s, more than "
                       f"{allowed:g} s of the {self.timeout_s:g} s timeout", max(1, math.ceil(wait - allowed)))  # fmt: skip

    def started(self, now: float) -> None:
        self._advance(now)
        self.in_flight += 1

    def finished(self, now: float, answered: bool) -> None:
        """A request left: `answered` when the server did its work for it (any outcome that took
        its share of the capacity), False when it gave up early (client gone)."""
        self._advance(now)
        self.in_flight -= 1
        if answered:
            self._answered += 1

    def _advance(self, now: float) -> None:
        busy = max(0.0, now - self._t) if self.in_flight else 0.0
        self._t = now
        decay = 0.5 ** (busy / HALF_LIFE_S)
        # busy time accrues at the decayed weight it has by now, as the answers do
        self._busy_s = (self._busy_s + busy) * decay
        self._answered *= decay
