"""Synthetic request streams for the simulator: arrival times and input lengths.

`librispeech` lengths follow the shape of LibriSpeech's training utterances, not the data itself:
the corpus paper (Panayotov et al., ICASSP 2015) gives 960 h in ~281k utterances for the training
sets, a mean of ~12.3 s, with segments cut to at most 35 s; most lie between 10 and 16.7 s with a long
tail of shorter ones. The model is a mixture fitted by hand to those figures (no histogram was
fitted): 95% are 16.7 s minus a Gamma(shape 2, scale 2.7 s) draw (mode 14.0 s, long left tail), 5%
are uniform on (16.7, 35] s, and anything under 1 s is drawn again. That gives a mean of 12.3 s, a
median of 12.5 s and 69% of lengths in [10, 16.7] s.
"""

from __future__ import annotations

import numpy as np

ARRIVALS = ("poisson", "uniform")
LIBRISPEECH_MIN_S, LIBRISPEECH_MAX_S = 1.0, 35.0
_BULK_EDGE_S, _TAIL_SHARE = 16.7, 0.05
_GAMMA_SHAPE, _GAMMA_SCALE_S = 2.0, 2.7


def arrival_times(kind: str, rate: float, duration: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times in [0, duration): Poisson (exponential gaps) or uniform (constant gaps)."""
    if kind not in ARRIVALS:
        raise ValueError(f"arrival must be one of {ARRIVALS}, not {kind!r}")
    if not rate > 0 or not duration > 0:
        raise ValueError("rate and duration must be positive")
    if kind == "uniform":
        return np.arange(0.0, duration, 1.0 / rate)
    # draw a few more gaps than expected so one draw nearly always covers the duration
    n = int(rate * duration + 6 * np.sqrt(rate * duration) + 10)
    times = np.cumsum(rng.exponential(1.0 / rate, n))
    while times[-1] < duration:
        times = np.concatenate([times, times[-1] + np.cumsum(rng.exponential(1.0 / rate, n))])
    return times[times < duration]


def input_lengths(spec: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` lengths in seconds: "librispeech" or "fixed:S"."""
    if spec == "librispeech":
        return librispeech_lengths(n, rng)
    if spec.startswith("fixed:"):
        try:
            seconds = float(spec.removeprefix("fixed:"))
        except ValueError:
            seconds = -1.0
        if seconds > 0:
            return np.full(n, seconds)
    raise ValueError(f"lengths must be 'librispeech' or 'fixed:SECONDS', not {spec!r}")


def librispeech_lengths(n: int, rng: np.random.Generator) -> np.ndarray:
    out = np.empty(0)
    while out.size < n:
        m = n - out.size + 16
        bulk = _BULK_EDGE_S - rng.gamma(_GAMMA_SHAPE, _GAMMA_SCALE_S, m)
        tail = rng.uniform(_BULK_EDGE_S, LIBRISPEECH_MAX_S, m)
        draw = np.where(rng.random(m) < _TAIL_SHARE, tail, bulk)
        out = np.concatenate([out, draw[draw >= LIBRISPEECH_MIN_S]])
    return out[:n]
