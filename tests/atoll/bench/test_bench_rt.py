"""`atoll bench rt`'s admission in candidate order and its per-model summary, on a WCET profile
written here (the timed phases run in the benchmark itself)."""

from __future__ import annotations

import time
from concurrent.futures import Future

import pytest
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


def test_the_stall_term_counts_no_wake_up_that_waited_beside_real_time_work():
    """A wake-up whose wait overlapped a real-time task may have waited for that task's run, which
    the analysis counts as execution: only the others make the stall term."""
    probe = StallProbe()
    # wake-ups due at 0, 10, 20, 30 ms, late by 8, 1, 6, 2 ms
    probe.due_s, probe.late_s = [0.0, 0.010, 0.020, 0.030], [0.008, 0.001, 0.006, 0.002]
    assert probe.max_late_s == 0.008  # nothing in flight: every wake-up counts
    probe.busy(0.005, 0.009)  # a real-time task in flight while the first waited
    probe.busy(0.015, 0.019)  # ... one between the second's and the third's waits: overlaps neither
    probe.busy(0.0265, 0.027)  # ... one that arrived just after the third woke (at 26 ms)
    assert probe.outside_real_time() == [0.001, 0.006, 0.002]
    probe.busy(0.0255, 0.0258)  # one that ran inside the third's wait
    assert probe.max_late_s == 0.002
    summary = probe.summary()
    assert (summary["wake_ups"], summary["outside_real_time"], summary["max_late_ms"], summary["max_late_any_ms"]) \
        == (4, 2, 2.0, 8.0)


def test_a_phases_tally_tells_the_probe_of_its_real_time_rows_only():
    probe = StallProbe()
    probe.due_s, probe.late_s = [0.001, 0.011], [0.002, 0.002]
    tally = Tally(probe=probe)
    for arrival, end, real_time in ((0.0, 0.002, True), (0.01, 0.014, False)):  # the second demoted
        f = Future()
        f.set_result(TaskResult({}, arrival, arrival, None, end, 0, 0))
        tally.outstanding += 1
        tally.answered(f, None, "s", real_time=real_time)
    assert probe.outside_real_time() == [0.002]  # the first wake-up waited beside the real-time row
