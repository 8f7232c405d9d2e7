"""Real-time guarantees in the server (DART on REEF): admission at load, enforcement at run time.

A model is a guaranteed real-time model when its config's `parameters` declare an envelope and a
deadline (its requests are real-time by their Triton priority, or its `default_priority_level`):

    atoll.rt.rate_per_s    rows a second it may send, sustained (required)
    atoll.rt.burst         rows it may send at once (default 1)
    atoll.rt.deadline_ms   relative deadline of one request, arrival at the front end to its answer
                           (required; the bound adds the profile's measured front-end hops to the
                           dispatcher's part: the network to a remote client is not in it)
    atoll.rt.on_violation  `demote` (default: run as best-effort) or `refuse` rows beyond the
                           envelope, and every row of a model that overran its budget

Admission (`check`, before a load or a config change replaces anything): the response-time
analysis (scheduler/rt_analysis.py) over every declared model with the WCETs of the profile of
each vGPU kind served (`batching/profiles/rt_<kind>.json`, or the folder `$ATOLL_RT_PROFILES`
names; `atoll rt profile`); a model's row may run on any vGPU (real-time rows go to the one with
the fewest in flight), so every vGPU's stage counts every declared model, and a model's bound is
the largest over the kinds. A media model's rows also cross the preprocessing stage (its profiled
`preprocess_ms`). Every stage counts the platform's measured stall (`stall_ms`); the front end's
hops (`front_end_ms`) are a fixed delay. Real-time rows skip the batcher, so its wait is 0. A load
that would make any admitted model miss its deadline is refused, naming the model, its bound and
its deadline; the bounds go to the front ends, whose config answers show them
(`atoll.rt.bound_ms`, atoll/wire/rt_bounds.py).

Enforcement (`route`, `ran`): `scheduler.rt_envelope.RtGuard` per declared model; a real-time
batch's budget is the vGPU stage's bound (its run, the rows ahead of it and the blocking), from
the dispatcher's send to the worker's answer. Metrics per model: `atoll_rt_bound_seconds`,
`atoll_rt_deadline_seconds`, `atoll_rt_observed_worst_seconds` (arrival at the dispatcher to the
answer) and `atoll_rt_demoted_total` (by reason: envelope, overrun); `atoll rt status` reads them.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from batching.profile import SHIPPED
from scheduler.rt_analysis import Bound, Envelope, RtModel, Stage, analyse, refusal
from scheduler.rt_envelope import ON_VIOLATION, Reason, RtGuard, Verdict
from scheduler.rt_profile import WcetProfile

from atoll.repository.specs import ModelSpec

RATE, BURST, DEADLINE, ON_VIOLATION_PARAM = ("atoll.rt.rate_per_s", "atoll.rt.burst", "atoll.rt.deadline_ms",
                                             "atoll.rt.on_violation")  # fmt: skip
PREPROCESS = "preprocess"


class RtRefused(ValueError):
    """A load that the admission test refuses (or a declaration it cannot read)."""


@dataclass(frozen=True)
class Declaration:
    envelope: Envelope
    deadline_s: float
    on_violation: str = "demote"


def declaration(spec: ModelSpec) -> Declaration | None:
    """The model's declared envelope and deadline, None when it declares none."""
    p = spec.parameters
    if RATE not in p and DEADLINE not in p:
        return None
    try:
        envelope = Envelope(float(p[RATE]), int(p.get(BURST, "1")))
        deadline_ms = float(p[DEADLINE])
    except KeyError as e:
        raise RtRefused(f"model {spec.name!r}: a real-time declaration needs {RATE} and {DEADLINE} "
                        f"(missing {e.args[0]})") from None  # fmt: skip
    except ValueError as e:
        raise RtRefused(f"model {spec.name!r}: bad real-time parameters: {e}") from None
    on_violation = p.get(ON_VIOLATION_PARAM, "demote")
    if on_violation not in ON_VIOLATION or not deadline_ms > 0:
        raise RtRefused(f"model {spec.name!r}: {DEADLINE} must be > 0 and {ON_VIOLATION_PARAM} one of "
                        f"{', '.join(ON_VIOLATION)}")  # fmt: skip
    return Declaration(envelope, deadline_ms * 1e-3, on_violation)


PROFILES_ENV = "ATOLL_RT_PROFILES"  # a folder of rt_<kind>.json to read instead of the shipped ones


def profile_path(kind: str) -> Path:
    return Path(os.environ.get(PROFILES_ENV) or SHIPPED) / f"rt_{kind}.json"


def load_wcet_profile(path: Path) -> WcetProfile:
    return WcetProfile.from_json(json.loads(path.read_text()))


def bounds_for(declared: dict[str, tuple[ModelSpec, Declaration]], profiles: dict[str, WcetProfile | None]
               ) -> dict[str, Bound]:  # fmt: skip
    """Every declared model's bound over the vGPU kinds of `profiles` (RtRefused where a WCET is missing)."""
    worst: dict[str, Bound] = {}
    for kind, profile in profiles.items():
        missing = [n for n in declared if profile is None or n not in profile.models]
        if missing:
            raise RtRefused(f"no WCET of real-time model(s) {', '.join(map(repr, missing))} on {kind!r} vGPUs in "
                            f"{profile_path(kind)} (measure it: atoll rt profile)")  # fmt: skip
        stages = [Stage(kind, profile.blocking_s, {n: profile.models[n].per_row_s() for n in declared},
                        profile.stall_s)]  # fmt: skip
        media = {n: profile.models[n].preprocess_s for n, (spec, _) in declared.items() if spec.padded}
        if media:
            unmeasured = [n for n, v in media.items() if v <= 0]
            if unmeasured:
                raise RtRefused(f"no preprocessing WCET of real-time model(s) {', '.join(map(repr, unmeasured))} "
                                f"in {profile_path(kind)}")  # fmt: skip
            stages.append(Stage(PREPROCESS, 0.0, media, profile.stall_s))
        models = [RtModel(n, d.envelope, d.deadline_s, ((PREPROCESS,) if n in media else ()) + (kind,),
                          profile.front_end_s) for n, (_, d) in declared.items()]  # fmt: skip
        for name, bound in analyse(models, stages).items():
            if name not in worst or bound.total_s > worst[name].total_s:
                worst[name] = bound
    return worst


class RealTime:
    """The server's declared real-time models: admission, the guard and the metrics."""

    def __init__(self, kinds, metrics=None, profiles: dict[str, WcetProfile | None] | None = None):
        if profiles is None:
            profiles = {k: load_wcet_profile(profile_path(k)) if profile_path(k).is_file() else None
                        for k in set(kinds)}  # fmt: skip
        self.profiles = profiles
        self.metrics = metrics
        self.declared: dict[str, tuple[ModelSpec, Declaration]] = {}
        self.bounds: dict[str, Bound] = {}
        self.guard = RtGuard()

    def _with(self, spec: ModelSpec) -> dict[str, tuple[ModelSpec, Declaration]]:
        declared = {n: v for n, v in self.declared.items() if n != spec.name}
        d = declaration(spec)
        if d is not None:
            declared[spec.name] = (spec, d)
        return declared

    def check(self, spec: ModelSpec) -> dict[str, Bound]:
        """The bounds with `spec` served (replacing its served version); RtRefused naming every
        model that would miss."""
        declared = self._with(spec)
        if not declared:
            return {}
        bounds = bounds_for(declared, self.profiles)
        line = refusal(bounds)
        if line is not None:
            raise RtRefused(line)
        return bounds

    def admit(self, spec: ModelSpec) -> None:
        bounds = self.check(spec)
        self.declared = self._with(spec)
        self.bounds = bounds
        self.guard.forget(spec.name)
        for name, (_, d) in self.declared.items():
            stage = max(v for s, v in bounds[name].stages_s.items() if s != PREPROCESS)
            if name not in self.guard.models:
                self.guard.declare(name, d.envelope, {1: stage}, d.on_violation, bounds[name].total_s)
            g = self.guard.models[name]
            g.budget_s, g.bound_s = {1: stage}, bounds[name].total_s  # the others' bounds moved
            self._export(name)

    def forget(self, name: str) -> None:
        if name in self.declared:
            del self.declared[name]
            self.guard.forget(name)
            self.bounds = bounds_for(self.declared, self.profiles) if self.declared else {}

    def bounds_ms(self) -> dict[str, float]:
        """Each declared model's bound now, in ms (its config answer's `atoll.rt.bound_ms`)."""
        return {name: b.total_s * 1e3 for name, b in self.bounds.items()}

    def route(self, model: str, rows: int, now: float) -> Verdict:
        verdict, reason = self.guard.classify(model, rows, now)
        if reason is not None and self.metrics is not None:
            self.metrics.rt_demoted.labels(model, reason.value).inc(rows)
        return verdict

    def ran(self, model: str, rows: int, elapsed_s: float, worst_response_s: float) -> None:
        if model in self.guard.models:
            self.guard.ran(model, rows, elapsed_s)
            self.guard.responded(model, worst_response_s)
            self._export(model)

    def _export(self, name: str) -> None:
        g = self.guard.models[name]
        if self.metrics is not None:
            self.metrics.rt_bound.labels(name).set(g.bound_s if g.bound_s is not None else math.nan)
            self.metrics.rt_deadline.labels(name).set(self.declared[name][1].deadline_s)
            self.metrics.rt_worst.labels(name).set(g.worst_s)
            for reason in Reason:
                self.metrics.rt_demoted.labels(name, reason.value).inc(0)
