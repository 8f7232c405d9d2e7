"""`atoll bench rt`: real-time models with a guarantee (DART's admission and enforcement on REEF)
beside best-effort load that saturates the vGPU.

1. WCETs measured on this vGPU (atoll/bench/rt_wcet.py), margin `--margin`.
2. Admission: the candidate real-time models, in order, each admitted only if the response-time
   analysis (scheduler/rt_analysis.py) still bounds every admitted model by its deadline; the set
   so admitted then runs `--calibrate-s` at its envelopes to calibrate the blocking, and the
   candidates are admitted again with it.
3. `admitted`: the admitted models' clients send at their declared envelopes (periodic at the
   declared rate, never faster, released together every cycle or from random phases:
   atoll/bench/rt_release.py) beside closed-loop best-effort clients on every BE stream, until
   `--requests` real-time requests have been sent; per model: bound, observed max
   and p99.9, deadline misses.
4. `enforcement`: the same, plus a client sending at `OVER_RATE` times its envelope and a model
   whose program outgrew its profile (declared with a smaller model's WCET): their excess is
   demoted to best-effort (scheduler/rt_envelope.py); the others must keep their bounds.
5. `admission-off`: every candidate forced in (the refused ones too) for contrast.

Responses are measured from the request's arrival at the scheduler (inputs on the vGPU) to its
answer; best-effort throughput is counted in each phase. On CPU vGPUs the process is pinned to
`--cpu-cores` cores, the vGPU's "SMs"."""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from gpu_runtime.compiler.importer import import_model
from gpu_runtime.executors.quiet import freeze_after_load
from gpu_runtime.priority import RT_FIFO_ENV, Priority, favour_real_time_threads, prioritise_this_thread
from gpu_runtime.zoo.builder import GraphBuilder
from scheduler.reef import Reef
from scheduler.rt_analysis import Bound, Envelope, RtModel, Stage, analyse, refusal
from scheduler.rt_envelope import RtGuard, Verdict
from scheduler.rt_profile import WcetProfile

from atoll.bench.harness import (
    emit,
    load_program,
    make_device,
    percentiles,
    pin_cpu_vgpu,
    random_inputs,
)
from atoll.bench.rt_release import RELEASES, hyperperiod, sends, slack
from atoll.bench.rt_wcet import StallProbe, be_loop, measure

# Real-time models: small CNNs (width, depth, input side), from a few hundred us to a few ms on a
# CPU vGPU, so that 100,000 requests fit in minutes.
CNNS = {"cnn-s": (16, 2, 32), "cnn-m": (32, 3, 32), "cnn-l": (24, 3, 40), "cnn-xl": (48, 4, 64)}


@dataclass(frozen=True)
class Candidate:
    model: str
    rate_per_s: float
    deadline_ms: float
    burst: int = 1


# Asked for in this order (deadlines in ms, rates in requests a second). On the 2-core VM, shared
# with other engineers' processes, the blocking measured beside the BE load is 100-200 ms (real-time
# throttling, a BE thread holding the interpreter lock preempted by other processes:
# docs/scheduling.md), so the deadlines are long next to the runs; cnn-xl's, shorter than that
# blocking, is refused.
CANDIDATES = {
    "cpu": (Candidate("cnn-s", 120, 300.0), Candidate("cnn-m", 80, 300.0), Candidate("cnn-l", 50, 400.0),
            Candidate("cnn-xl", 30, 10.0)),
    "cuda": (Candidate("cnn-s", 500, 2.0), Candidate("cnn-m", 300, 3.0), Candidate("cnn-l", 200, 4.0),
             Candidate("cnn-xl", 100, 0.5)),
}  # fmt: skip
# Best-effort clients (model, batch), each a closed loop on a stream of its own. On a CPU vGPU a
# running BE kernel holds the interpreter lock until its NumPy call returns, so their longest
# kernels are the blocking: MobileNetV3's are ~1 ms (squeezenet's 5 ms). On a GPU, preempt's
# saturating load.
BE_LOAD = {"cpu": (("mobilenet_v3_small", 1), ("mobilenet_v3_small", 1)),
           "cuda": (("squeezenet1_1", 32), ("swin_t", 32))}
OVER_RATE = 3.0
# A model whose program outgrew its profile: declared (rate, deadline) and WCET as cnn-s's, it
# runs cnn-xl's program, several times longer.
OVERRUN = ("cnn-s", "cnn-xl", 20.0)
STAGE = "vgpu"
RT_FIFO = 20


def register(subparsers) -> None:
    p = subparsers.add_parser("rt", help="real-time guarantees: admission, bounds vs observed, enforcement")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--requests", type=int, default=100_000,
                   help="real-time requests in the admitted phase (default 100000)")
    p.add_argument("--enforce-s", type=float, default=30.0, help="seconds of the enforcement phase")
    p.add_argument("--contrast-s", type=float, default=30.0, help="seconds of the admission-off phase")
    p.add_argument("--runs", type=int, default=400, help="timed runs per model for its WCET")
    p.add_argument("--calibrate-s", type=float, default=60.0,
                   help="seconds the admitted set runs at its envelopes to calibrate the blocking")
    p.add_argument("--probes", type=int, default=400,
                   help="real-time requests per model preempting the BE load, for the blocking")
    p.add_argument("--margin", type=float, default=1.25, help="WCET = measured maximum x margin")
    p.add_argument("--release", choices=RELEASES, default="critical",
                   help="real-time clients released together every cycle, the analysis' worst case "
                        "(critical, default), or each from a random phase")
    p.add_argument("--policy", default="reset", choices=("reset", "reef"), help="scheduler policy")
    p.add_argument("--cpu-cores", type=int, default=1, help="cores the CPU vGPU owns (see disb)")
    p.add_argument("--rt-fifo", type=int, default=RT_FIFO,
                   help=f"SCHED_FIFO priority of the relaying threads, real-time ones one above (default "
                        f"{RT_FIFO}: above the servers' on a shared machine; 0 = ordinary threads)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the results JSON on stdout")
    p.add_argument("--out", type=Path, default=None, help="results file (default bench/results/rt_<device>.json)")
    p.set_defaults(func=run)


def small_cnn(name: str, width: int, depth: int, side: int, seed: int):
    g = GraphBuilder(seed)
    x = g.conv_bn_act("input", 3, width, 3, stride=2, act="relu")
    for _ in range(depth):
        x = g.conv_bn_act(x, width, width, 3, act="relu")
    x = g.linear(g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1), width, 10)
    return g.model(name, [("input", ["N", 3, side, side])], [(x, "logits", ["N", 10])])


def admit(candidates, profile: WcetProfile, blocking_s: float, stall_s: float = 0.0):
    """(admitted, refused {model: reason}, bounds of the admitted set) in the candidates' order."""
    admitted, refused = [], {}
    for c in candidates:
        line = refusal(bounds_of([*admitted, c], profile, blocking_s, stall_s))
        if line is None:
            admitted.append(c)
        else:
            refused[c.model] = line
    return admitted, refused, bounds_of(admitted, profile, blocking_s, stall_s)


def bounds_of(candidates, profile: WcetProfile, blocking_s: float, stall_s: float = 0.0,
              declared: dict | None = None) -> dict[str, Bound]:
    declared = declared or {}
    stage = Stage(STAGE, blocking_s, {c.model: profile.models[declared.get(c.model, c.model)].per_row_s()
                                      for c in candidates}, stall_s)  # fmt: skip
    models = [RtModel(c.model, Envelope(c.rate_per_s, c.burst), c.deadline_ms * 1e-3, (STAGE,)) for c in candidates]
    return analyse(models, [stage])


@dataclass
class Tally:
    """One model's requests in a phase, as numbers only: 100,000 answers kept as objects would
    give the garbage collector a heap to walk in the middle of real-time work."""

    sent: int = 0
    demoted: int = 0
    refused: int = 0
    failed: int = 0
    response_s: list = field(default_factory=list)  # real-time rows: arrival at the vGPU .. answer
    outstanding: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Condition = None

    def __post_init__(self):
        self.done = threading.Condition(self.lock)

    def answered(self, future, guard: RtGuard | None, model: str, real_time: bool) -> None:
        error = future.exception()
        r = None if error is not None else future.result()
        with self.lock:
            if real_time:
                if r is None:
                    self.failed += 1
                else:
                    self.response_s.append(r.end_s - r.arrival_s)
            self.outstanding -= 1
            self.done.notify_all()
        if real_time and r is not None and guard is not None:
            guard.ran(model, 1, r.cpu_s)  # its own kernels' CPU time: no blocking, no other process

    def wait(self) -> None:
        with self.done:
            self.done.wait_for(lambda: self.outstanding == 0)


def run_phase(kind: str, policy: str, clients: list[Candidate], programs: dict, inputs: dict, be: dict,
              guard: RtGuard | None, duration: float, seed: int, over_rate: dict | None = None,
              release: str = "critical") -> dict:
    """One phase on a fresh scheduler: a Tally per model, BE completions, seconds."""
    over_rate = over_rate or {}
    rates = {c.model: c.rate_per_s * over_rate.get(c.model, 1.0) for c in clients}
    cycle_s = hyperperiod(rates.values()) if rates else 0.0
    ex, dev, _ = make_device(kind, measure_start=True, os_priorities=True)
    reef = Reef(ex, dev, policy, be_streams=len(be))
    for c in clients:
        reef.add_client(c.model, programs[c.model], "rt")
        reef.add_client(f"{c.model}~be", programs[c.model], "be")  # where its demoted rows run
    for name, program in be.items():
        reef.add_client(name, program, "be")
    tallies = {c.model: Tally() for c in clients}
    be_done = dict.fromkeys(be, 0)
    rng = np.random.default_rng(seed)
    with reef:
        for name in [*(c.model for c in clients), *be]:
            reef.submit(name, inputs[name]).result()
        freeze_after_load()
        start = reef.clock() + 0.05
        stop_at = start + duration
        threads = [threading.Thread(target=be_loop, args=(reef, n, inputs[n], stop_at, be_done)) for n in be]
        threads += [threading.Thread(target=_rt_client, args=(
            reef, guard, c, rates[c.model], inputs[c.model],
            sends(rates[c.model], cycle_s, start, release, rng.uniform(0, 1.0 / rates[c.model]), (k, len(clients))),
            stop_at, tallies[c.model])) for k, c in enumerate(clients)]  # fmt: skip
        with StallProbe() as probe:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        for tally in tallies.values():
            tally.wait()  # every answer before the scheduler stops
    dev.close()
    return {"tallies": tallies, "be_done": sum(be_done.values()), "seconds": duration, "guard": guard,
            "stalls": probe.summary(), "max_stall_s": probe.max_late_s}


def _rt_client(reef, guard: RtGuard | None, c: Candidate, rate: float, inputs, due, stop_at: float,
               tally: Tally) -> None:
    """Sends at the times `due` yields, never two closer than 1 / rate (a late wake-up delays the
    sends after it rather than bunching them)."""
    prioritise_this_thread(Priority.RT)
    clock, period = reef.clock, 1.0 / rate
    last = -math.inf
    for t in due:
        t = max(t, last + period)
        if t >= stop_at:
            break
        delay = t - clock()
        if delay > 0:
            time.sleep(delay)
        now = clock()
        verdict = guard.classify(c.model, 1, now)[0] if guard is not None else Verdict.RT
        with tally.lock:
            tally.sent += 1
            tally.demoted += verdict is Verdict.DEMOTE
            tally.refused += verdict is Verdict.REFUSE
            tally.outstanding += verdict is not Verdict.REFUSE
        if verdict is not Verdict.REFUSE:
            real_time = verdict is Verdict.RT
            future = reef.submit(c.model if real_time else f"{c.model}~be", inputs)
            future.add_done_callback(lambda f, rt=real_time: tally.answered(f, guard, c.model, rt))
        last = now


def summarise(phase: dict, deadlines: dict, bounds: dict[str, Bound]) -> dict:
    out = {}
    for model, tally in phase["tallies"].items():
        response = tally.response_s
        lat = percentiles(response, qs=(50, 99, 99.9))
        bound = bounds.get(model)
        bound_ms = None if bound is None or math.isinf(bound.total_s) else round(bound.total_s * 1e3, 3)
        out[model] = {
            "sent": tally.sent,
            "real_time": len(response),
            "demoted": tally.demoted,
            "refused": tally.refused,
            "failed": tally.failed,
            "deadline_ms": deadlines[model],
            "bound_ms": bound_ms,
            "response_ms": lat,
            "misses": sum(1 for s in response if s * 1e3 > deadlines[model]),
            "over_bound": None if bound_ms is None else sum(1 for s in response if s * 1e3 > bound_ms),
            "bound_over_max": round(bound_ms / lat["max"], 3) if bound_ms and lat["max"] else None,
            "bound_terms_ms": bound.terms_ms() if bound_ms is not None else None,
        }
        g = phase["guard"].models.get(model) if phase["guard"] is not None else None
        if g is not None:
            out[model]["demoted_by"] = {r.value: n for r, n in g.demoted.items()}
            out[model]["overran"] = g.overran
    return {"models": out, "be_throughput_rps": round(phase["be_done"] / phase["seconds"], 2),
            "seconds": phase["seconds"], "platform_stalls": phase.get("stalls")}


def run(args) -> int:
    kind = args.device
    os.environ[RT_FIFO_ENV] = str(args.rt_fifo)  # read by every thread that takes an OS priority
    cores = pin_cpu_vgpu(args.cpu_cores) if kind == "cpu" else None
    favour_real_time_threads()
    candidates = CANDIDATES[kind]
    print(f"bench rt: building {len(CNNS)} real-time and {len(BE_LOAD[kind])} best-effort models",
          file=sys.stderr)
    programs = {m: import_model(small_cnn(m, *CNNS[m], seed=args.seed + k), batch=1, name=m)
                for k, m in enumerate(CNNS)}  # fmt: skip
    be = {f"be{k}-{m}": load_program(m, kind, args.seed + 100 + k, batch) for k, (m, batch) in enumerate(BE_LOAD[kind])}
    inputs = {n: random_inputs(p, args.seed + k) for k, (n, p) in enumerate([*programs.items(), *be.items()])}
    print("bench rt: measuring WCETs", file=sys.stderr)
    profiling = StallProbe()
    profile = measure(kind, {m: {1: programs[m]} for m in programs}, be,
                      {**{m: {1: inputs[m]} for m in programs}, **{n: inputs[n] for n in be}}, args.runs,
                      args.margin, args.probes,
                      source=f"atoll bench rt, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
                      probe=profiling)  # fmt: skip
    probed, stall_seen = profile.blocking_s, profile.stall_s / args.margin
    admitted, _, _ = admit(candidates, profile, probed, profile.stall_s)
    # Calibration: the probes above preempt the BE load one request at a time, but the platform's
    # stalls (throttling, the interpreter lock held by a preempted BE thread) peak with the
    # real-time load: the set admitted so far runs at its envelopes for --calibrate-s, with the
    # stall probe; the platform's stall is the largest it saw in either, and the blocking at least
    # the most any response exceeded every model's measured run by together (which may hold a
    # stall as well: counted in both, the safe side).
    calibration = run_phase(kind, args.policy, admitted, programs, inputs, be, None, args.calibrate_s,
                            args.seed + 3, release=args.release) if admitted and args.calibrate_s > 0 else None  # fmt: skip
    together = sum(m.observed_max_s[1] for n, m in profile.models.items() if n in programs)
    if calibration:
        stall_seen = max(stall_seen, calibration["max_stall_s"])
        worst = max(max(t.response_s, default=0.0) for t in calibration["tallies"].values())
        calibrated = max(0.0, worst - together) * args.margin
    else:
        calibrated = 0.0
    blocking, stall = max(probed, calibrated), stall_seen * args.margin
    admitted, refused, bounds = admit(candidates, profile, blocking, stall)
    deadlines = {c.model: c.deadline_ms for c in candidates}
    phases = {}

    def guard_for(clients, declared=None):
        # Budgets are checked on the run's own CPU time, which neither blocking nor another process's
        # threads inflate, against its measured wall-clock WCET; three in a row, since a VM's
        # neighbours still slow a core's caches and memory now and then.
        g = RtGuard(strikes=3)
        for c in clients:
            w = profile.models[(declared or {}).get(c.model, c.model)].execution_s
            g.declare(c.model, Envelope(c.rate_per_s, c.burst), w,
                      bound_s=bounds[c.model].total_s if c.model in bounds else None)
        return g

    rate = sum(c.rate_per_s for c in admitted)
    # Clients never send faster than their envelopes, a late wake-up delays the rest, and critical
    # cycles have their slack: 8 % more time than the rates and the slack need, so that --requests are sent.
    duration = 1.08 * (1 + slack(args.release)) * args.requests / rate if rate else 0.0
    print(f"bench rt: admitted {[c.model for c in admitted]}, refused {list(refused)}; "
          f"{args.requests} requests take {duration:.0f} s", file=sys.stderr)
    if admitted:
        phases["admitted"] = summarise(run_phase(kind, args.policy, admitted, programs, inputs, be,
                                                 guard_for(admitted), duration, args.seed, release=args.release),
                                       deadlines, bounds)  # fmt: skip
        # Enforcement: the first admitted model's client at OVER_RATE x its envelope, and a model
        # declared with OVERRUN[0]'s WCET that runs OVERRUN[1]'s program.
        liar_as, liar_runs, liar_rate = OVERRUN
        liar = replace(next(c for c in candidates if c.model == liar_as), model=f"{liar_runs}-as-{liar_as}",
                       rate_per_s=liar_rate)
        clients = [*admitted, liar]
        declared = {liar.model: liar_as}
        programs_e = {**programs, liar.model: programs[liar_runs]}
        inputs_e = {**inputs, liar.model: inputs[liar_runs]}
        deadlines_e = {**deadlines, liar.model: liar.deadline_ms}
        bounds_e = bounds_of(clients, profile, blocking, stall, declared)
        line = refusal(bounds_e)
        if line is None:  # admitted on its declared WCET, as an outdated profile would have it
            phases["enforcement"] = summarise(run_phase(
                kind, args.policy, clients, programs_e, inputs_e, be, guard_for(clients, declared),
                args.enforce_s, args.seed + 1, over_rate={admitted[0].model: OVER_RATE}, release=args.release),
                deadlines_e, bounds_e)  # fmt: skip
            phases["enforcement"]["over_rate"] = {"model": admitted[0].model, "factor": OVER_RATE}
            phases["enforcement"]["overrun"] = {"model": liar.model, "declared_as": liar_as, "runs": liar_runs}
        else:
            phases["enforcement"] = {"skipped": f"the overrunning model was refused at admission: {line}"}
    forced = bounds_of(list(candidates), profile, blocking, stall)
    phases["admission_off"] = summarise(run_phase(kind, args.policy, list(candidates), programs, inputs, be, None,
                                                  args.contrast_s, args.seed + 2, release=args.release),
                                        deadlines, forced)  # fmt: skip
    admitted_phase = phases.get("admitted", {}).get("models", {})
    acceptance = {  # the analysis safe (every response within its bound) and useful (bound <= 2x the maximum)
        "responses_over_bound": sum(r["over_bound"] or 0 for r in admitted_phase.values()),
        "bound_over_max": {m: r["bound_over_max"] for m, r in admitted_phase.items()},
        "misses": sum(r["misses"] for r in admitted_phase.values()),
        "real_time_requests": sum(r["real_time"] for r in admitted_phase.values()),
        # the analysis' premise: no platform stall longer than the one measured before the run
        "platform_stall_term_ms": round(stall * 1e3, 3),
        "largest_stall_in_run_ms": phases.get("admitted", {}).get("platform_stalls", {}).get("max_late_ms"),
    }
    _, dev, description = make_device(kind)
    dev.close()
    if cores is not None:
        description = f"{description}, pinned to cores {cores}"
    out = {
        "device": description,
        "policy": args.policy,
        "release": args.release,
        "analysis": "FIFO stage with blocking and the platform's stall, scheduler/rt_analysis.py; blocking "
                    "measured beside the BE load, stall by a stall probe (scheduler/rt_profile.py)",
        "blocking_ms": round(blocking * 1e3, 3),
        "platform_stall_ms": round(stall * 1e3, 3),
        "platform_stall_profiling": profiling.summary(),
        "platform_stall_calibration": calibration["stalls"] if calibration else None,
        "blocking_probed_ms": round(probed * 1e3, 3),
        "blocking_calibrated_ms": round(calibrated * 1e3, 3),
        "calibration_s": args.calibrate_s,
        "wcet_profile": profile.to_json(),
        "candidates": [c.__dict__ for c in candidates],
        "admitted": [c.model for c in admitted],
        "refused": refused,
        "be_clients": [{"model": m, "batch": b} for m, b in BE_LOAD[kind]],
        "rt_fifo": os.environ.get(RT_FIFO_ENV),
        "phases": phases,
        "acceptance": acceptance,
    }
    path = Path(args.out or Path("bench/results") / f"rt_{kind}.json")
    lines = []
    for name, phase in phases.items():
        for model, r in phase.get("models", {}).items():
            lines.append(f"{name:>14} {model:>16}: {r['real_time']} RT ({r['demoted']} demoted), bound "
                         f"{r['bound_ms']} ms {r['bound_terms_ms']}, max {r['response_ms']['max']} ms, p99.9 "
                         f"{r['response_ms']['p99.9']} ms, deadline {r['deadline_ms']} ms, misses {r['misses']}, "
                         f"over the bound {r['over_bound']}")
    lines.append(f"admitted phase: {acceptance['real_time_requests']} real-time requests, {acceptance['misses']} "
                 f"misses, {acceptance['responses_over_bound']} over the bound, bound / max "
                 f"{acceptance['bound_over_max']}; platform stall term {acceptance['platform_stall_term_ms']} ms, "
                 f"largest stall in the run {acceptance['largest_stall_in_run_ms']} ms")
    emit(out, path, args.json, lines)
    return 0
