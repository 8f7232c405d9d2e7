"""Pacing of 503 answers: clients that resend a refused request at once (a closed loop, a retry
ignoring Retry-After) must not turn a front end's event loop into one that only refuses, starving
the work it admitted until admission, measuring fewer answers, refuses ever more.

Each front end sends 503s at once up to `per_answer` times the rate at which it answers what it
admits (at least `least_per_s`), after a burst of `BURST_S`'s worth; past that each waits its turn
(a generic cell rate algorithm), never more than `MAX_HOLD_S`. The pace is relative, not fixed: a
held 503 costs a connection and a timer and slows no open-loop client, so an ordinary overload goes
unpaced. Other answers never wait. The measurements behind it: docs/http-edge.md.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable

MAX_HOLD_S = 1.0  # the least Retry-After a refusal carries: a client that honours it loses nothing
BURST_S = 0.1  # of the pace, sent at once after a quiet spell
LEAST_PER_S = 100.0  # the pace while the front end answers little or nothing yet


class RefusalPace:
    """The pace of one front end's 503s: `per_answer` (0: unpaced) times `answers_per_s()` (the
    front end's answer rate, None before it has one), at least `least_per_s`. Every call passes
    the time (seconds). `held` (a counter, or None) counts the answers that wait."""

    def __init__(self, per_answer: float, answers_per_s: Callable[[], float | None], held=None,
                 least_per_s: float = LEAST_PER_S):
        self.per_answer = per_answer
        self.answers_per_s = answers_per_s
        self.held = held
        self.least_per_s = least_per_s
        self._tat = 0.0  # when the next answer would be due at an even pace

    def _interval(self) -> float:
        return 1.0 / max(self.least_per_s, self.per_answer * (self.answers_per_s() or 0.0))

    def free(self, now: float) -> bool:
        """Whether a 503 may go now (it then takes its place in the pace)."""
        if not self.per_answer:
            return True
        tat = max(self._tat, now)
        if tat - BURST_S > now:
            return False
        self._tat = tat + self._interval()
        return True

    def hold(self, now: float) -> float:
        """How long a 503 answered now waits before it is sent (0: at once). It takes its place in
        the pace, unless its turn is more than `MAX_HOLD_S` away: it then waits that long, outside it."""
        if self.free(now):
            return 0.0
        if self.held is not None:
            self.held.inc()
        wait = self._tat - BURST_S - now
        if wait >= MAX_HOLD_S:
            return MAX_HOLD_S
        self._tat += self._interval()
        return wait

    async def turn(self) -> None:
        """Wait until a 503 answered now may be sent (on the running loop's clock)."""
        wait = self.hold(asyncio.get_running_loop().time())
        if wait:
            await asyncio.sleep(wait)
