"""Worst-case response bounds of real-time models (DART's admission test, adapted): pure, no clock.

A real-time request crosses a pipeline of stages (preprocessing on a lane, execution on a vGPU),
each a FIFO server among the real-time work that shares it, and it may find the stage busy with
best-effort work it cannot cut short (`blocking_s`). DART (Xiang and Kim, RTSS 2019) admits a
real-time task only if a response-time analysis over its pipeline of stages bounds its response by
its deadline; here each stage is analysed on its own and the stages are composed holistically.

Arrivals: a model declares a token-bucket envelope (`Envelope`: `burst` rows at once, `rate_per_s`
sustained), so in any closed window of length d at most  eta(d) = burst + floor(d * rate)  of its
rows arrive; a row that arrives up to J later than its release (the jitter the earlier stages add)
gives eta(d + J) (release jitter, Tindell and Clark, "Holistic schedulability analysis for
distributed hard real-time systems", 1994, eq. 1-3).

One stage, FIFO, non-preemptive among real-time rows, per-row WCET C_j, blocking B:

    L = B + sum_j (burst_j + ceil((L + J_j) rate_j) - 1) C_j            (level-i busy period,
                                                                          least fixed point)
    R = B + max over d in [0, L) of ( sum_j eta_j(d + J_j) C_j - d )     (FIFO delay bound)

R is the horizontal deviation between the aggregate arrival curve and the service curve
(d - B)+ (Le Boudec and Thiran, "Network Calculus", 2001, Thm 1.4.2), evaluated at the steps of
the staircase, where it is largest; every row arriving in the busy period at or before the one
analysed (ties served first) is served before it, so all models sharing a stage get one bound.
The busy period exists while sum_j rate_j C_j < 1.

Pipeline (holistic): a model's bound is the sum of its stage bounds plus its fixed delays (the
batcher's wait, the framework's hops); the jitter of a model at a stage is the sum of its bounds at
the stages before. Bounds grow with jitter, so the iteration from zero jitter is monotone and stops
at the least fixed point, or when a bound passes `horizon_s` (unschedulable).

Platform stalls: a stage may also lose its core, or in a CPU vGPU's process the interpreter lock,
to something other than real-time work for up to S at a time: the platform (the hypervisor, the
kernel's real-time throttling, another process's higher-priority threads) or the process's other
threads (a best-effort kernel holding the lock, its holder kept off the core by another process).
The stall probe measures S: the largest lateness of a thread of the vGPU's process, on its cores,
one SCHED_FIFO level above the real-time lanes, asking to wake every few ms, times the margin. It
waits as a ready real-time thread waits for the core and the lock, but not for the lanes' work,
which it preempts: at their level it could wait for whole real-time runs, which the sum above counts
already as C_j (a row's run counted twice: in one run, 7.9 ms beside a 7.6 ms model alone, 1.3 ms
above); what it still waits for of them, the lock held by the current call, is counted twice, the
safe side. Each stage counts S once per busy period, beside the blocking: R = B + S + ... (an
assumption, stated: at most one such stall per busy period, which is what the probe's largest
lateness can vouch for; on a loaded machine a run, which takes the lock again at every kernel, may
wait for it several times: then the bound is not kept, and `atoll bench rt` shows it). B, measured
from real responses beside the best-effort load, may hold a stall too: a blocking and a stall may
come in one busy period, so both count, the safe side.

Multi-lane stages (m lanes pulling from one FIFO queue) are analysed as one lane: with equal
per-row times a row starts no later on m lanes than on one (by induction over the FIFO order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Counting a window's arrivals a hair generously keeps the step points (d + J) * rate = k exact
# under float rounding; over-counting is the safe side.
_EPS = 1e-9
MAX_TEST_POINTS = 200_000


class Unschedulable(ValueError):
    """A stage has no bounded busy period (its real-time load is 1 or more, or the horizon is passed)."""


@dataclass(frozen=True)
class Envelope:
    """At most `burst` rows at once and `rate_per_s` rows a second sustained (a token bucket)."""

    rate_per_s: float
    burst: int = 1

    def __post_init__(self):
        if not self.rate_per_s > 0 or self.burst < 1:
            raise ValueError(f"an envelope needs rate_per_s > 0 and burst >= 1, not {self}")

    def closed(self, window_s: float) -> int:
        """Most rows arriving in a closed window of `window_s` (>= 0)."""
        return self.burst + math.floor(window_s * self.rate_per_s + _EPS)

    def half_open(self, window_s: float) -> int:
        """Most rows arriving in a half-open window [t, t + window_s), window_s > 0."""
        return self.burst + math.ceil(window_s * self.rate_per_s + _EPS) - 1


@dataclass(frozen=True)
class Demand:
    """One model's real-time rows at one stage: its envelope, WCET per row and release jitter."""

    model: str
    envelope: Envelope
    wcet_s: float
    jitter_s: float = 0.0


def utilisation(demands: list[Demand]) -> float:
    return sum(d.envelope.rate_per_s * d.wcet_s for d in demands)


def busy_period(demands: list[Demand], blocking_s: float, horizon_s: float = 60.0) -> float:
    """L, the longest stretch the stage may stay busy with real-time work (plus the blocking)."""
    if utilisation(demands) >= 1.0:
        raise Unschedulable(f"real-time load {utilisation(demands):.3f} >= 1")
    length = blocking_s + sum(d.envelope.burst * d.wcet_s for d in demands)
    while True:
        nxt = blocking_s + sum(d.envelope.half_open(length + d.jitter_s) * d.wcet_s for d in demands)
        if nxt <= length:
            return length
        if nxt > horizon_s:
            raise Unschedulable(f"busy period passes {horizon_s} s")
        length = nxt


def fifo_bound(demands: list[Demand], blocking_s: float, horizon_s: float = 60.0) -> float:
    """R: the longest a real-time row may spend at the stage, from arrival to its end (see above)."""
    if not demands:
        return 0.0
    length = busy_period(demands, blocking_s, horizon_s)
    points = {0.0}
    for d in demands:
        rate, jitter = d.envelope.rate_per_s, d.jitter_s
        k = math.ceil(jitter * rate - _EPS)  # the first step at or after d = 0
        while (at := k / rate - jitter) < length:
            points.add(max(at, 0.0))
            k += 1
            if len(points) > MAX_TEST_POINTS:
                raise Unschedulable("too many test points: the busy period is too long")
    return blocking_s + max(sum(d.envelope.closed(at + d.jitter_s) * d.wcet_s for d in demands) - at
                            for at in points)  # fmt: skip


@dataclass(frozen=True)
class Stage:
    """A FIFO server real-time rows cross: per-row WCET of each model that crosses it, and the
    blocking best-effort (or other non-preemptible) work may impose on a real-time row."""

    name: str
    blocking_s: float
    wcet_s: dict[str, float]
    stall_s: float = 0.0  # the platform's longest stall of the stage's core (see above)


@dataclass(frozen=True)
class RtModel:
    name: str
    envelope: Envelope
    deadline_s: float
    path: tuple[str, ...]  # the stages its rows cross, in order
    fixed_s: float = 0.0  # delays outside any stage: the batcher's wait, the framework's hops


@dataclass
class Bound:
    model: str
    deadline_s: float
    stages_s: dict[str, float] = field(default_factory=dict)
    fixed_s: float = 0.0
    blocking_s: float = 0.0  # of the stages' bounds, what the blocking terms are
    stall_s: float = 0.0  # ... and the platform's stalls

    def terms_ms(self) -> dict[str, float]:
        """How much of the bound each term is: the fixed delays, the blocking, the platform's stalls,
        and the rest (real-time rows' WCETs and their queueing)."""
        rest = self.total_s - self.fixed_s - self.blocking_s - self.stall_s
        return {k: round(v * 1e3, 3) for k, v in (("fixed", self.fixed_s), ("blocking", self.blocking_s),
                                                   ("platform_stall", self.stall_s),
                                                   ("execution_and_queueing", rest))}  # fmt: skip

    @property
    def total_s(self) -> float:
        return self.fixed_s + sum(self.stages_s.values())

    @property
    def meets(self) -> bool:
        return self.total_s <= self.deadline_s


def analyse(models: list[RtModel], stages: list[Stage], horizon_s: float = 60.0) -> dict[str, Bound]:
    """Every model's worst-case response bound (holistic iteration over the stages). A stage
    without a bounded busy period gives its models an infinite bound."""
    by_name = {s.name: s for s in stages}
    for m in models:
        for s in m.path:
            if s not in by_name or m.name not in by_name[s].wcet_s:
                raise ValueError(f"model {m.name!r} crosses stage {s!r}, which has no WCET for it")
    jitter = {(m.name, s): 0.0 for m in models for s in m.path}
    while True:
        per_stage: dict[str, float] = {}
        for stage in stages:
            demands = [Demand(m.name, m.envelope, stage.wcet_s[m.name], jitter[m.name, stage.name])
                       for m in models if stage.name in m.path]  # fmt: skip
            try:
                per_stage[stage.name] = fifo_bound(demands, stage.blocking_s + stage.stall_s, horizon_s)
            except Unschedulable:
                per_stage[stage.name] = math.inf
        bounds = {m.name: Bound(m.name, m.deadline_s, {s: per_stage[s] for s in m.path}, m.fixed_s,
                                sum(by_name[s].blocking_s for s in m.path), sum(by_name[s].stall_s for s in m.path))
                  for m in models}  # fmt: skip
        changed = False
        for m in models:
            before = 0.0
            for s in m.path:
                if before != jitter[m.name, s]:
                    jitter[m.name, s] = before
                    changed = True
                before += per_stage[s]
        if not changed or any(math.isinf(v) or v > horizon_s for v in jitter.values()):
            return bounds


def refusal(bounds: dict[str, Bound]) -> str | None:
    """One line naming every model that would miss its deadline, with its bound; None if none."""
    missed = [b for b in bounds.values() if not b.meets]
    if not missed:
        return None
    return "; ".join(f"real-time model {b.model!r} would miss its deadline: bound "
                     f"{_ms(b.total_s)} > deadline {_ms(b.deadline_s)}" for b in missed)  # fmt: skip


def _ms(seconds: float) -> str:
    return "unbounded" if math.isinf(seconds) else f"{seconds * 1e3:.3f} ms"
