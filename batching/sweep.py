"""Rate sweeps: the rate grid and the highest rate that meets a p95 latency SLO."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def parse_rates(spec: str) -> list[float]:
    """"a:b:step" -> [a, a+step, ..., <= b] requests per second."""
    try:
        start, stop, step = (float(x) for x in spec.split(":"))
    except ValueError:
        raise ValueError(f"rates must be START:STOP:STEP, not {spec!r}") from None
    if not (start > 0 and step > 0 and stop >= start):
        raise ValueError(f"rates {spec!r}: need START > 0, STEP > 0 and STOP >= START")
    return [float(r) for r in np.arange(start, stop + step * 1e-9, step)]


def max_rate_at_slo(rates: Sequence[float], p95_ms: Sequence[float], slo_ms: float) -> float | None:
    """The highest swept rate before the first one whose p95 exceeds the SLO (None if the lowest
    already does): a rate that happens to pass past a failing one is noise, not capacity."""
    best = None
    for rate, p95 in sorted(zip(rates, p95_ms)):
        if not p95 <= slo_ms:
            break
        best = rate
    return best
