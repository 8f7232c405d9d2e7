"""Admission on a simulated clock: the bound follows from the timeout and the measured answer rate,
and at 3x overload what is admitted is answered in time while goodput stays at capacity."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from atoll.front_end.admission import FLOOR, WAIT_SHARE, Admission


def test_admits_up_to_the_floor_before_anything_is_answered():
    a = Admission(timeout_s=1.0)
    for _ in range(100):  # no rate yet: never refused, however many
        assert a.refuse(0.0) is None
        a.started(0.0)
    assert a.in_flight == 100 and a.rate is None


def _busy(a: Admission, rate: float, seconds: float, in_flight: int) -> float:
    """Keep `in_flight` requests in `a`, answering `rate` per second for `seconds`; returns the time."""
    t = 0.0
    while a.in_flight < in_flight:
        a.started(t)
    for _ in range(int(rate * seconds)):
        t += 1 / rate
        a.finished(t, answered=True)
        a.started(t)
    return t


@pytest.mark.parametrize("timeout_s", [2.0, 8.0])
def test_the_bound_follows_from_the_timeout_and_the_measured_rate(timeout_s):
    a = Admission(timeout_s)
    t = _busy(a, rate=100.0, seconds=20.0, in_flight=FLOOR)
    assert a.rate == pytest.approx(100.0, rel=0.05)
    while a.refuse(t) is None:
        a.started(t)
    bound = a.in_flight
    assert bound == pytest.approx(100.0 * timeout_s * WAIT_SHARE, rel=0.06)
    refusal = a.refuse(t)
    assert refusal.retry_after_s >= 1 and f"{timeout_s:g} s timeout" in refusal.reason


def test_a_fixed_cap_applies_on_top():
    a = Admission(timeout_s=60.0, cap=3)
    for _ in range(3):
        a.started(0.0)
    refusal = a.refuse(0.0)
    assert refusal is not None and "max_pending_requests" in refusal.reason


def test_cancelled_requests_do_not_count_as_answers():
    a = Admission(timeout_s=1.0)
    a.started(0.0)
    a.finished(1.0, answered=False)
    assert a.rate is None


def test_three_times_overload_keeps_goodput_at_capacity_and_answers_in_time():
    """A server of 4 workers answering 25 req/s each (100 req/s), fed 300 req/s of Poisson arrivals
    for 60 s with a 2 s timeout: every admitted request finishes before its deadline, and the
    requests answered are at least 90% of capacity."""
    rng = np.random.default_rng(0)
    capacity, workers, timeout = 100.0, 4, 2.0
    service = workers / capacity
    a = Admission(timeout)
    arrivals = np.cumsum(rng.exponential(1 / (3 * capacity), int(3 * capacity * 60)))
    queue: list[float] = []  # deadlines of admitted requests waiting, FIFO
    busy: list[float] = []  # completion times of the requests being served
    ok = late = refused = 0
    for arrival in [*arrivals, float("inf")]:
        while busy and busy[0] <= arrival:  # completions, and the next queued request starts
            t = heapq.heappop(busy)
            a.finished(t, answered=True)
            ok += 1
            if queue:
                deadline = queue.pop(0)
                late += t + service > deadline
                heapq.heappush(busy, t + service)
        if arrival == float("inf"):
            break
        if a.refuse(arrival) is not None:
            refused += 1
            continue
        a.started(arrival)
        if len(busy) < workers:
            heapq.heappush(busy, arrival + service)
        else:
            queue.append(arrival + timeout)
    goodput = ok / arrivals[-1]
    assert late == 0
    assert goodput >= 0.9 * capacity
    assert refused > 0.5 * len(arrivals)


def _closed_loop(a: Admission, connections: int, rate_at, start: float, end: float) -> tuple[int, int]:
    """`connections` closed-loop clients from `start` to `end` against a server that answers one
    request at a time in arrival order, `rate_at(t)` a second; a refused client resends 1 ms later
    (its 503's round trip). Returns (answers, refusals)."""
    events = [(start, "send")] * connections  # (time, what)
    queue = 0  # requests admitted, not yet answered
    answers = refusals = 0
    free_at = start  # when the server finishes its current request
    while events:
        t, what = heapq.heappop(events)
        if t >= end:
            break
        if what == "answer":
            a.finished(t, answered=True)
            answers += 1
            queue -= 1
            heapq.heappush(events, (t, "send"))
        elif a.refuse(t) is not None:
            refusals += 1
            heapq.heappush(events, (t + 0.001, "send"))
        else:
            a.started(t)
            queue += 1
            free_at = max(free_at, t) + 1 / rate_at(free_at)
            heapq.heappush(events, (free_at, "answer"))
    return answers, refusals


def test_a_burst_after_idle_is_admitted_while_the_first_answers_are_slow():
    """The issue's case: a server that answered ~350 requests a second sits idle 20 s; a burst of 64
    closed-loop connections arrives while another process holds the cores for its first 2 s (a few
    answers a second). Its in-flight requests would wait well under a tenth of the 120 s timeout
    (350 a second again after 2 s), so none is refused."""
    a = Admission(timeout_s=120.0)
    answers, refusals = _closed_loop(a, 64, lambda t: 350.0, 0.0, 30.0)
    assert refusals == 0 and answers > 30 * 340
    while a.in_flight:  # the first phase ends: its requests are answered
        a.finished(30.0, answered=True)
    answers, refusals = _closed_loop(a, 64, lambda t: 3.0 if t < 52.0 else 350.0, 50.0, 60.0)
    assert refusals == 0 and answers > 7 * 340


def test_a_fresh_server_is_not_judged_on_its_first_few_answers():
    """No history at all, and the first 2 s answer 3 a second: a rate read from those few answers
    (~3 a second, 64 in flight: ~20 s of waiting) would refuse; it is not a sample to refuse on."""
    a = Admission(timeout_s=120.0)
    answers, refusals = _closed_loop(a, 64, lambda t: 3.0 if t < 2.0 else 350.0, 0.0, 10.0)
    assert refusals == 0 and answers > 7 * 340


def test_a_server_that_stopped_answering_is_still_refused():
    """The sample rule does not disarm admission: after a busy period, answers stop; once its
    busy seconds say even a full sample of answers would leave the in-flight requests waiting
    past the allowance, new requests are refused."""
    a = Admission(timeout_s=12.0)
    t = _busy(a, rate=100.0, seconds=10.0, in_flight=FLOOR)
    refused_at = None
    while refused_at is None:
        t += 0.01
        if a.refuse(t) is not None:
            refused_at = t
        else:
            a.started(t)
    assert a.in_flight < 100 * 1.2 * 2  # never more than a couple of allowances' worth of the old rate
