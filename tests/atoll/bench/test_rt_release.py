"""`atoll bench rt`'s release schedule: clients released together every cycle, within their envelopes."""

from __future__ import annotations

from itertools import islice

import pytest

from atoll.bench.rt_release import LAST_BY, SLACK, hyperperiod, sends, slack


def test_the_cycle_is_the_periods_least_common_multiple():
    assert hyperperiod([120, 80, 50]) == pytest.approx(0.1)
    assert hyperperiod([360, 80, 50, 20]) == pytest.approx(0.1)  # the enforcement phase's rates
    assert hyperperiod([500, 300, 200, 100]) == pytest.approx(0.01)
    assert hyperperiod([2.5, 4]) == pytest.approx(2.0)


def test_released_together_the_clients_meet_at_every_cycles_start():
    rates, cycle = (120, 80, 50), hyperperiod([120, 80, 50])
    due = {r: list(islice(sends(r, cycle, 10.0, "critical", phase=0.003), 3 * round(r * cycle))) for r in rates}
    for c in range(3):
        starts = [due[r][c * round(r * cycle)] for r in rates]
        assert starts == pytest.approx([10.0 + c * cycle * (1 + SLACK)] * len(rates))
    for r, times in due.items():
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert min(gaps) == pytest.approx(1 / r)  # never faster than the envelope
        assert max(gaps) == pytest.approx(1 / r + cycle * SLACK)  # the slack between cycles
        assert len(times) / (times[-1] + 1 / r + cycle * SLACK - times[0]) == pytest.approx(r / (1 + SLACK))


def test_random_phases_keep_the_rate_and_have_no_slack():
    times = list(islice(sends(80, 0.1, 0.0, "random", phase=0.004), 24))
    assert times[0] == pytest.approx(0.004)
    assert [b - a for a, b in zip(times, times[1:])] == pytest.approx([1 / 80] * 23)
    assert (slack("random"), slack("critical")) == (0.0, SLACK)  # what the bench's duration allows for


def test_an_unknown_release_is_refused():
    with pytest.raises(ValueError, match="critical"):
        sends(80, 0.1, 0.0, "sometimes", phase=0.0)


def test_each_client_in_turn_is_released_last():
    """Released at one time, the clients wake in the order they slept: the analysis' worst case
    (a row served after every other) is given to each model a cycle in n instead."""
    cycle, rates = 0.1, (120, 80, 50)
    firsts = {k: list(islice(sends(r, cycle, 0.0, "critical", 0.0, (k, 3)), 0, 6 * round(r * cycle), round(r * cycle)))
              for k, r in enumerate(rates)}  # fmt: skip
    for c in range(6):
        base = c * cycle * (1 + SLACK)
        late = [k for k in firsts if firsts[k][c] > base + 1e-9]
        assert late == [c % 3] and firsts[c % 3][c] == pytest.approx(base + LAST_BY)
