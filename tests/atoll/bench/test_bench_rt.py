"""`atoll bench rt`'s admission in candidate order and its per-model summary, on a WCET profile
written here (the timed phases run in the benchmark itself)."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future

import pytest
from gpu_runtime.priority import RT_FIFO_ENV, Priority, prioritise_this_thread
from scheduler.rt_analysis import Bound
from scheduler.rt_profile import ModelWcet, WcetProfile
from scheduler.task import TaskResult

from atoll.bench.rt import Candidate, Tally, admit, summarise
from atoll.bench.rt_wcet import StallProbe

PROFILE = WcetProfile("cpu", 1.0, 1e-3, {"s": ModelWcet({1: 1e-3}, {}, 0.0), "m": ModelWcet({1: 2e-3}, {}, 0.0),
                                         "xl": ModelWcet({1: 9e-3}, {}, 0.0)})  # fmt: skip


def test_candidates_are_admitted_in_order_while_every_deadline_holds():
    candidates = (Candidate("s", 100, 6.0), Candidate("m", 50, 8.0), Candidate("xl", 10, 50.0))
    admitted, refused, bounds = admit(candidates, PROFILE, PROFILE.blocking_s)
    assert [c.model for c in admitted] == ["s", "m"]  # 1 + 1 + 2 = 4 ms
    assert bounds["s"].total_s == pytest.approx(4e-3)
    # with xl: 1 + 1 + 2 + 9 = 13 ms > 6 and 8
    assert refused == {"xl": "real-time model 's' would miss its deadline: bound 13.000 ms > deadline 6.000 ms; "
                             "real-time model 'm' would miss its deadline: bound 13.000 ms > deadline 8.000 ms"}


def test_summary_counts_misses_and_compares_bound_and_maximum():
    tally = Tally()
    for arrival, end in ((0.0, 0.002), (0.01, 0.014), (0.02, 0.027)):
        f = Future()
        f.set_result(TaskResult({}, arrival, arrival, None, end, 0, 0))
        tally.outstanding += 1
        tally.answered(f, None, "s", real_time=True)
    tally.sent, tally.demoted = 4, 1
    bound = Bound("s", 5e-3, {"vgpu": 0.007}, 0.001, blocking_s=0.002, stall_s=0.003)
    out = summarise({"tallies": {"s": tally}, "be_done": 30, "seconds": 10.0, "guard": None}, {"s": 5.0}, {"s": bound})
    r = out["models"]["s"]
    assert (r["real_time"], r["demoted"], r["misses"], r["over_bound"], r["bound_ms"]) == (3, 1, 1, 0, 8.0)
    assert r["bound_over_max"] == pytest.approx(8 / 7, abs=1e-3) and out["be_throughput_rps"] == 3.0
    assert r["bound_terms_ms"] == {"fixed": 1.0, "blocking": 2.0, "platform_stall": 3.0, "execution_and_queueing": 2.0}


def test_the_platforms_stall_is_a_term_of_the_bound():
    admitted, _, bounds = admit((Candidate("s", 100, 6.0),), PROFILE, PROFILE.blocking_s, stall_s=2e-3)
    assert bounds["s"].total_s == pytest.approx(4e-3)  # 1 blocking + 2 stall + 1 WCET
    assert bounds["s"].terms_ms() == {"fixed": 0.0, "blocking": 1.0, "platform_stall": 2.0,
                                      "execution_and_queueing": 1.0}  # fmt: skip


def test_the_stall_probe_runs_only_inside_its_blocks_and_keeps_what_each_saw():
    probe = StallProbe(period_s=0.001)
    with probe:
        while not probe.late_s:  # its first wake-up, however long the machine takes
            time.sleep(0.001)
    first = len(probe.late_s)
    time.sleep(0.01)
    assert len(probe.late_s) == first  # stopped between blocks
    with probe:
        while len(probe.late_s) == first:
            time.sleep(0.001)
    assert probe.max_late_s == max(probe.late_s) >= 0 and probe.summary()["wake_ups"] == len(probe.late_s)


def test_the_stall_probe_runs_one_level_above_the_real_time_lanes(monkeypatch):
    """At the lanes' level the probe would wait for their runs, which the analysis counts already as
    execution: above them it preempts them."""
    monkeypatch.setenv(RT_FIFO_ENV, "5")
    levels = {}

    def lane():
        prioritise_this_thread(Priority.RT)
        levels["lane"] = os.sched_getparam(0).sched_priority

    t = threading.Thread(target=lane)
    t.start()
    t.join()
    probe = StallProbe(period_s=0.001)
    with probe:
        while not probe.late_s:  # it has taken its priority by its first wake-up
            time.sleep(0.001)
        levels["probe"] = os.sched_getparam(probe._thread.native_id).sched_priority
    # SCHED_FIFO where the OS permits it: lanes at RT_FIFO + 1, the probe one above; elsewhere ordinary
    assert (levels["lane"], levels["probe"]) in ((6, 7), (0, 0))
