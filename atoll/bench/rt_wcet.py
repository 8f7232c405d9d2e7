"""Measuring the WCETs the real-time admission test reads (scheduler/rt_profile.py) on a vGPU
through the REEF scheduler in this process, as `atoll bench rt` runs it (a served model's, through
the worker path: atoll/bench/rt_worker.py).

- execution: a real-time batch alone on the vGPU, arrival to answer, `runs` times; its WCET is the
  largest run times the margin;
- the longest kernel of every model run as best-effort work: each launch timed `reps` times;
- the blocking: real-time rows of each model preempting saturating best-effort work (every BE
  model on a stream of its own, closed loops): the largest response over the model's median
  alone, times the margin; on a CPU vGPU no less than the BE models' longest kernel (times the
  margin), which a real-time row arriving as it starts may wait for: a few hundred probes, one
  at a time, meet the BE kernels' worst phase less often than a 100,000-request run's critical
  instants do;
- the platform's stall: a `StallProbe`, above the real-time lanes, runs while the runs alone and
  the probes are timed.

The measuring threads take the OS priorities of served work (`gpu_runtime.priority`): real-time
rows are sent from a SCHED_FIFO thread where the OS permits, as the benchmark's clients are. Each
request waits one to three times the last one's response first: back to back, the SCHED_FIFO
threads would use up Linux's real-time share of the core (95 % of each second) and be stopped
for the rest, a 50 ms stall no served load at the envelopes meets.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from concurrent.futures import Future

import numpy as np
from gpu_runtime.executors.quiet import freeze_after_load
from gpu_runtime.priority import Priority, above_real_time_this_thread, prioritise_this_thread
from scheduler.reef import Reef
from scheduler.rt_profile import ModelWcet, WcetProfile

from atoll.bench.harness import make_device


def on_thread(priority: Priority, fn, *args):
    """fn(*args) on a new thread of `priority`'s OS priority; its result (or its exception)."""
    result: Future = Future()

    def body():
        prioritise_this_thread(priority)
        try:
            result.set_result(fn(*args))
        except BaseException as e:  # handed to the caller
            result.set_exception(e)

    t = threading.Thread(target=body, name=f"bench-{priority}")
    t.start()
    t.join()
    return result.result()


class StallProbe:
    """A thread of this process one SCHED_FIFO level above the real-time lanes (where the OS
    permits) that asks to wake every `period_s`: how late it woke is how long a ready real-time
    thread may wait for its core and the interpreter lock for anything but real-time work: the
    platform (the hypervisor, the kernel's real-time throttling, another process's higher-priority
    threads) and this process's other threads (a best-effort kernel holding the lock, a holder kept
    off the core by another process). Its largest lateness, times the margin, is the analysis'
    stall term (scheduler/rt_profile.py). Linux's throttling (`sched_rt_period_us -
    sched_rt_runtime_us`, 50 ms by default) is one such stall: measured when it happens, not assumed.

    Above the lanes it preempts their threads, so of the real-time work in flight it waits only for
    the interpreter lock, which a holder gives up after its current call (or the switch interval);
    at the lanes' level it could wait for whole real-time runs, which the analysis counts already as
    execution (in one run, a 7.6 ms model's runs alone: 7.9 ms at their level, 1.3 ms above). It
    runs only while real-time work is timed (`with probe:`, any number of times), not while programs
    are built or loaded, which hold the lock for long and never run beside served work."""

    def __init__(self, period_s: float = 0.005):
        self.period_s = period_s
        self.late_s: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "StallProbe":
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(self._stop,), name="bench-stall-probe", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self, stop: threading.Event) -> None:
        above_real_time_this_thread()
        while not stop.is_set():
            due = time.perf_counter() + self.period_s
            time.sleep(self.period_s)
            self.late_s.append(time.perf_counter() - due)

    @property
    def max_late_s(self) -> float:
        return max(self.late_s, default=0.0)

    def summary(self) -> dict:
        late = self.late_s
        return {"wake_ups": len(late), "max_late_ms": round(self.max_late_s * 1e3, 3),
                "over_50ms": sum(1 for v in late if v > 0.05)}


def be_loop(reef, name: str, inputs: dict, stop_at: float, done: dict, stop: threading.Event | None = None) -> None:
    """A best-effort closed loop at BE's OS priority, counting in `done[name]` the answers that came
    by `stop_at`. Counted, not kept: answers kept by the thousand give the garbage collector a heap
    to walk in the middle of real-time work (tens of ms)."""
    prioritise_this_thread(Priority.BE)
    done.setdefault(name, 0)
    while reef.clock() < stop_at and not (stop is not None and stop.is_set()):
        try:
            end = reef.submit(name, inputs).result().end_s
        except RuntimeError:  # the scheduler stopped under us
            return
        done[name] += end <= stop_at  # one key per thread: no lock


def execution_runs(kind: str, program, inputs: dict, runs: int, probe: StallProbe, warmup: int = 5) -> list[float]:
    """Arrival-to-answer times of `runs` real-time requests, one at a time on an idle vGPU (`probe`
    running while they are timed)."""
    ex, dev, _ = make_device(kind, measure_start=True, os_priorities=True)
    reef = Reef(ex, dev, "reset", be_streams=1)
    reef.add_client("rt", program, "rt")
    rng = np.random.default_rng(0)
    with reef:
        freeze_after_load()  # as a server does after a load: collections walk only what runs allocate
        last = 0.0
        for _ in range(warmup):
            last = _paced(reef, inputs, rng, last)
        with probe:
            times = [last := _paced(reef, inputs, rng, last) for _ in range(runs)]
    dev.close()
    return times


def _paced(reef, inputs: dict, rng, last: float) -> float:
    """One real-time request's response, sent one to three times the last one after it (see above)."""
    time.sleep(rng.uniform(1.0, 3.0) * last)
    r = reef.submit("rt", inputs).result()
    return r.end_s - r.arrival_s


def longest_kernel_s(kind: str, program, inputs: dict, reps: int = 5) -> float:
    ex, dev, _ = make_device(kind, os_priorities=True)
    state = dev.load(program, guarded=False)
    dev.set_inputs(state, inputs)
    longest = max(dev.time_launch(state, i) for _ in range(reps) for i in range(len(program.launches)))
    dev.close()
    return longest


def responses_beside_be(kind: str, rt: dict, rt_inputs: dict, be: dict, be_inputs: dict, n: int,
                        probe: StallProbe, policy: str = "reset") -> dict[str, list[float]]:
    """Responses of `n` real-time requests per model of `rt` {model: program}, one at a time,
    each a random while after the last, preempting closed-loop BE clients `be` {model: program}."""
    ex, dev, _ = make_device(kind, measure_start=True, os_priorities=True)
    reef = Reef(ex, dev, policy, be_streams=max(1, len(be)))
    for name, program in rt.items():
        reef.add_client(name, program, "rt")
    for name, program in be.items():
        reef.add_client(name, program, "be")
    rng = np.random.default_rng(0)
    out: dict[str, list[float]] = {name: [] for name in rt}
    with reef:
        for name in [*rt, *be]:
            reef.submit(name, rt_inputs[name] if name in rt else be_inputs[name]).result()
        freeze_after_load()
        stop = threading.Event()
        loops = [threading.Thread(target=be_loop, args=(reef, name, be_inputs[name], math.inf, {}, stop))
                 for name in be]  # fmt: skip
        for t in loops:
            t.start()

        def send():
            last = 0.0
            for _ in range(n):
                for name in rt:
                    time.sleep(0.002 + rng.uniform(1.0, 3.0) * last)  # BE work is running again by then
                    r = reef.submit(name, rt_inputs[name]).result()
                    last = r.end_s - r.arrival_s
                    out[name].append(last)

        with probe:
            on_thread(Priority.RT, send)
        stop.set()
        for t in loops:
            t.join()
    dev.close()
    return out


def measure(kind: str, rt: dict, be: dict, inputs: dict, runs: int, margin: float,
            blocking_requests: int = 100, source: str = "", probe: StallProbe | None = None) -> WcetProfile:
    """A WCET profile: `rt` {model: {batch: program}} measured as real-time work, `be` {model:
    program} as the best-effort load (their longest kernels and the blocking); `inputs` holds
    {model: {batch: inputs}} for `rt` and {model: inputs} for `be`. `probe`: the stall probe to
    use, for its summary (a new one if None)."""
    probe = probe or StallProbe()
    models, excess = _measured(kind, rt, be, inputs, runs, margin, blocking_requests, probe)
    stall = probe.max_late_s
    blocking = excess * margin
    if kind == "cpu":  # a BE kernel in flight may hold the lock until it returns: no less than its longest
        blocking = max([blocking, *(models[name].longest_kernel_s for name in be)])  # margin included
    return WcetProfile(kind, margin, blocking, models, source, stall * margin)


def _measured(kind: str, rt: dict, be: dict, inputs: dict, runs: int, margin: float, blocking_requests: int,
              probe: StallProbe):
    """(models' WCETs, the largest excess of a response beside the BE load)."""
    models, medians = {}, {}
    for name, by_batch in rt.items():
        alone = {b: on_thread(Priority.RT, execution_runs, kind, p, inputs[name][b], runs, probe)
                 for b, p in by_batch.items()}  # fmt: skip
        medians[name] = statistics.median(alone[min(by_batch)])
        observed = {b: max(v) for b, v in alone.items()}
        longest = max(on_thread(Priority.RT, longest_kernel_s, kind, p, inputs[name][b]) for b, p in by_batch.items())
        models[name] = ModelWcet({b: v * margin for b, v in observed.items()}, observed, longest * margin,
                                 runs=runs)  # fmt: skip
    for name, p in be.items():
        if name not in models:
            models[name] = ModelWcet({}, {}, on_thread(Priority.RT, longest_kernel_s, kind, p, inputs[name]) * margin)
    smallest = {name: min(by_batch) for name, by_batch in rt.items()}
    beside = responses_beside_be(kind, {n: rt[n][b] for n, b in smallest.items()},
                                 {n: inputs[n][b] for n, b in smallest.items()}, be, {n: inputs[n] for n in be},
                                 blocking_requests, probe)  # fmt: skip
    return models, max(max(v) - medians[n] for n, v in beside.items())

