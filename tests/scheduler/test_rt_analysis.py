"""The response-time analysis and its enforcement on hand-computed cases (scheduler/rt_analysis.py,
rt_envelope.py, rt_profile.py); times in ms are written as `ms(x)`."""

import math

import pytest

from scheduler.rt_analysis import (
    Demand,
    Envelope,
    RtModel,
    Stage,
    Unschedulable,
    analyse,
    busy_period,
    fifo_bound,
    refusal,
)
from scheduler.rt_envelope import Reason, RtGuard, TokenBucket, Verdict
from scheduler.rt_profile import ModelWcet, WcetProfile


def ms(x):
    return x * 1e-3


def test_envelope_counts_a_token_bucket():
    e = Envelope(rate_per_s=100, burst=2)  # 2 at once, then one per 10 ms
    assert e.closed(0) == 2 and e.closed(ms(9.9)) == 2 and e.closed(ms(10)) == 3
    assert e.half_open(ms(9.9)) == 2 and e.half_open(ms(10.1)) == 3
    assert e.half_open(ms(10)) == 3  # at a step both count the step's row: the safe side


def test_one_model_is_blocking_plus_its_wcet():
    d = [Demand("a", Envelope(100), ms(2))]
    assert busy_period(d, ms(1)) == pytest.approx(ms(3))
    assert fifo_bound(d, ms(1)) == pytest.approx(ms(3))


def test_two_models_with_a_burst():
    # A: T 10 ms, C 4 ms; B: T 20 ms, burst 2, C 3 ms; blocking 1 ms.
    # L = 1 + 4 + 2*3 = 11 -> 1 + 2*4 + 2*3 = 15 -> 15 ms. Test points 0 and 10 ms:
    # at 0: 4 + 6 - 0 = 10; at 10: 8 + 6 - 10 = 4. R = 1 + 10 = 11 ms.
    d = [Demand("a", Envelope(100), ms(4)), Demand("b", Envelope(50, 2), ms(3))]
    assert busy_period(d, ms(1)) == pytest.approx(ms(15))
    assert fifo_bound(d, ms(1)) == pytest.approx(ms(11))


def test_jitter_compresses_arrivals():
    # T 10 ms, C 2 ms, released up to 9 ms late: two rows may come 1 ms apart; the second ends
    # 2 + 2 ms after the first arrived, 3 ms after its own arrival.
    assert fifo_bound([Demand("a", Envelope(100), ms(2), jitter_s=ms(9))], 0.0) == pytest.approx(ms(3))


def test_a_full_stage_has_no_bound():
    with pytest.raises(Unschedulable):
        fifo_bound([Demand("a", Envelope(100), ms(6)), Demand("b", Envelope(100), ms(4))], 0.0)


def test_pipeline_sums_its_stages_with_jitter():
    # pre: C 1, B 0.5 -> 1.5 ms. exec (jitter 1.5): C 2, B 1, T 4 ms: L = 3 -> 1 + 2*2 = 5 -> 5;
    # points 0 and 4 - 1.5 = 2.5: 2 - 0 = 2, 4 - 2.5 = 1.5 -> R = 1 + 2 = 3 ms. Total 1.5 + 3 + 0.25.
    stages = [Stage("pre", ms(0.5), {"a": ms(1)}), Stage("exec", ms(1), {"a": ms(2)})]
    m = RtModel("a", Envelope(250), ms(5), ("pre", "exec"), fixed_s=ms(0.25))
    b = analyse([m], stages)["a"]
    assert b.stages_s == pytest.approx({"pre": ms(1.5), "exec": ms(3)})
    assert b.total_s == pytest.approx(ms(4.75)) and b.meets
    assert refusal({"a": b}) is None


def test_a_platform_stall_counts_once_per_stage_and_is_reported_apart():
    # as above, each stage losing its core for up to 0.5 ms more: pre 1 + 0.5 + 0.5 = 2 ms; exec
    # (jitter 2): B + S = 1.5, L = 1.5 + 2 = 3.5 -> 1.5 + 2*2 = 5.5 -> 5.5; points 0 and 4 - 2 = 2:
    # 2 - 0 = 2, 4 - 2 = 2 -> R = 1.5 + 2 = 3.5 ms. Total 2 + 3.5 + 0.25.
    stages = [Stage("pre", ms(0.5), {"a": ms(1)}, ms(0.5)), Stage("exec", ms(1), {"a": ms(2)}, ms(0.5))]
    b = analyse([RtModel("a", Envelope(250), ms(6), ("pre", "exec"), fixed_s=ms(0.25))], stages)["a"]
    assert b.stages_s == pytest.approx({"pre": ms(2), "exec": ms(3.5)})
    assert b.terms_ms() == pytest.approx({"fixed": 0.25, "blocking": 1.5, "platform_stall": 1.0,
                                          "execution_and_queueing": 3.0})  # fmt: skip


def test_refusal_names_model_bound_and_deadline():
    stages = [Stage("exec", 0.0, {"a": ms(2), "b": ms(8)})]
    models = [RtModel("a", Envelope(100), ms(5), ("exec",)), RtModel("b", Envelope(10), ms(50), ("exec",))]
    bounds = analyse(models, stages)
    assert bounds["a"].total_s == pytest.approx(ms(10)) and not bounds["a"].meets
    assert bounds["b"].meets
    assert refusal(bounds) == "real-time model 'a' would miss its deadline: bound 10.000 ms > deadline 5.000 ms"


def test_an_overloaded_stage_is_refused_as_unbounded():
    stages = [Stage("exec", 0.0, {"a": ms(20)})]
    bounds = analyse([RtModel("a", Envelope(100), ms(50), ("exec",))], stages)
    assert math.isinf(bounds["a"].total_s)
    assert "bound unbounded > deadline 50.000 ms" in refusal(bounds)


def test_token_bucket_refills_at_its_rate():
    b = TokenBucket(Envelope(100, 2), now=0.0)
    assert [b.take(0.0), b.take(0.0), b.take(0.0)] == [True, True, False]
    assert not b.take(ms(9)) and b.take(ms(10.1)) and not b.take(ms(11))


def test_guard_demotes_an_over_rate_client_and_keeps_the_others():
    g = RtGuard()
    g.declare("fast", Envelope(100), {1: ms(2)})
    g.declare("calm", Envelope(100), {1: ms(2)})
    verdicts = [g.classify("fast", 1, ms(t))[0] for t in range(0, 50)]  # 1000/s against 100/s
    assert verdicts.count(Verdict.RT) == 5  # the one at 0, then one per 10 ms up to 49 ms (0..40)
    assert g.models["fast"].demoted[Reason.ENVELOPE] == 45
    assert all(g.classify("calm", 1, ms(10 * k))[0] is Verdict.RT for k in range(5))
    assert g.classify("unknown", 3, 0.0) == (Verdict.RT, None)


def test_guard_demotes_an_overrunning_model_from_then_on_or_refuses():
    g = RtGuard(strikes=2)
    g.declare("slow", Envelope(100), {1: ms(2), 4: ms(5)})
    g.declare("strict", Envelope(100), {1: ms(2)}, on_violation="refuse")
    assert not g.ran("slow", 3, ms(4.9))  # within batch 4's budget
    assert not g.ran("slow", 1, ms(2.5))  # one overrun: a strike
    assert not g.ran("slow", 1, ms(1.0))  # strikes count in a row only
    assert not g.ran("slow", 1, ms(2.5)) and g.ran("slow", 2, ms(5.5))
    assert g.classify("slow", 1, 1.0) == (Verdict.DEMOTE, Reason.OVERRUN)
    g.reset("slow")
    assert g.classify("slow", 1, 2.0) == (Verdict.RT, None)
    g.ran("strict", 2, ms(4.5))  # beyond every budgeted batch: 2 ms a row
    assert g.ran("strict", 2, ms(4.5))
    assert g.classify("strict", 1, 1.0) == (Verdict.REFUSE, Reason.OVERRUN)
    g.responded("strict", ms(3)), g.responded("strict", ms(1))
    assert g.models["strict"].worst_s == ms(3)


def test_profile_round_trips():
    p = WcetProfile("cpu", 1.5, ms(0.3), {
        "a": ModelWcet({1: ms(3), 4: ms(8)}, {1: ms(2), 4: ms(5.3)}, ms(1.2), runs=100),
        "be": ModelWcet({1: ms(30)}, {1: ms(20)}, ms(1.8), runs=100)}, stall_s=ms(7), front_end_s=ms(2))
    q = WcetProfile.from_json(p.to_json())
    assert (q.kind, q.margin, q.blocking_s, set(q.models)) == (p.kind, p.margin, pytest.approx(p.blocking_s), {"a", "be"})
    assert (q.stall_s, q.front_end_s) == pytest.approx((ms(7), ms(2)))
    assert q.models["a"].execution_s == pytest.approx(p.models["a"].execution_s)
    assert q.models["be"].longest_kernel_s == pytest.approx(ms(1.8))
    assert p.models["a"].per_row_s() == pytest.approx(ms(3))
