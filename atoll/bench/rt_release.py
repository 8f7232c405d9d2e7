"""When `atoll bench rt`'s real-time clients send: periodic at their envelopes' rates, and either all
released together at the start of every cycle (`critical`, the default) or each from a random phase.

An analysis' bound is useful only if some arrival pattern the envelopes allow comes near it. At one
FIFO stage the worst case for burst-1 envelopes is every model's row arriving at once (the critical
instant: Liu and Layland, JACM 1973, Theorem 1, for periodic tasks; the busy period from zero in
`scheduler/rt_analysis.py`). With random phases the clients keep their relative offsets for the
whole run and may never meet; released together, they meet at the start of every cycle.

Which row is served last at such an instant decides whose response holds the others' runs: the
analysis bounds each model's row as the last of them. Released at one time, the clients would wake
in the order they went to sleep (the one with the longest period first, every cycle), so one model
would always be last and another never. Each cycle one client, in turn, is released `LAST_BY`
after the others, so every model is measured in the analysis' worst case a cycle in n.

A cycle is the rates' hyperperiod (the least common multiple of the periods: 100 ms for 120, 80 and
50 requests a second), in which each client sends `rate x hyperperiod` times at its period. A send
is never closer to the client's previous one than a period, so a late wake-up delays the sends after
it; each cycle is stretched by `SLACK` of it so that such a delay is absorbed before the next
cycle's common start instead of carrying the clients apart. The clients thus send at
1 / (1 + SLACK) of their rates: within their envelopes, 5 % below.
"""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import count

SLACK = 0.05
LAST_BY = 100e-6  # the cycle's last client behind the others: past a VM's wake-up jitter, short beside a run
RELEASES = ("critical", "random")


def hyperperiod(rates) -> float:
    """The least common multiple of the periods 1 / rate: 1 / gcd of the rates (as fractions)."""
    fractions = [Fraction(r).limit_denominator(1000) for r in rates]
    numerator = math.gcd(*(f.numerator for f in fractions))
    denominator = math.lcm(*(f.denominator for f in fractions))
    return float(Fraction(denominator, numerator))


def slack(release: str) -> float:
    """How much each cycle of `release` is stretched: its clients send at 1 / (1 + slack) of their rates."""
    return SLACK if release == "critical" else 0.0


def grid(rate: float, cycle_s: float, start: float, slack: float, turn: tuple[int, int] = (0, 1),
         last_by: float = 0.0):
    """The times a client at `rate` is due: `round(rate x cycle_s)` sends at its period from each
    cycle's start, cycles `cycle_s x (1 + slack)` apart; client `turn[0]` of `turn[1]` (> 1) starts
    every `turn[1]`-th cycle (from its `turn[0]`-th) `last_by` late."""
    period, per_cycle = 1.0 / rate, max(1, round(rate * cycle_s))
    k, n = turn
    for c in count():
        base = start + c * cycle_s * (1.0 + slack) + (last_by if n > 1 and c % n == k else 0.0)
        for j in range(per_cycle):
            yield base + j * period


def sends(rate: float, cycle_s: float, start: float, release: str, phase: float, turn: tuple[int, int] = (0, 1)):
    """A client's grid: released at `start` with the others, client `turn[0]` of `turn[1]` last in
    its cycles (`critical`), or from `start + phase` with no slack (`random`, the phase drawn by
    the caller in [0, period))."""
    if release == "critical":
        return grid(rate, cycle_s, start, slack(release), turn, LAST_BY)
    if release == "random":
        return grid(rate, cycle_s, start + phase, slack(release))
    raise ValueError(f"release must be one of {RELEASES}, not {release!r}")
