"""The pace of a front end's 503s (`refusal_pace`), on a clock the tests move."""

from atoll.http.refusal_pace import BURST_S, MAX_HOLD_S, RefusalPace


class Count:
    def __init__(self):
        self.n = 0

    def inc(self):
        self.n += 1


def test_a_burst_goes_at_once_then_each_503_waits_one_interval_more():
    held = Count()
    pace = RefusalPace(4, lambda: 25.0, held)  # 4 per answer at 25 answers a second: every 10 ms
    burst = [pace.hold(5.0) for _ in range(11)]
    assert burst == [0.0] * 11  # the first, and BURST_S's worth after it
    waits = [pace.hold(5.0) for _ in range(3)]
    assert [round(w, 6) for w in waits] == [0.01, 0.02, 0.03]
    assert held.n == 3
    assert pace.hold(5.0 + BURST_S + 1.0) == 0.0  # after a quiet spell, at once again


def test_the_pace_follows_the_answer_rate_and_has_a_floor():
    rate = [None]
    pace = RefusalPace(2, lambda: rate[0], least_per_s=10.0)
    assert all(pace.free(0.0) for _ in range(2))  # no answers yet: the floor, 10 a second, 0.1 s of burst
    assert not pace.free(0.0) and not pace.free(0.0)  # refused twice, and neither took a place
    assert round(pace.hold(0.0), 6) == 0.1
    rate[0] = 500.0  # answering 500 a second: 1,000 refusals a second go at once
    assert all(pace.free(1.0) for _ in range(101))


def test_no_503_waits_longer_than_the_longest_hold():
    pace = RefusalPace(1, lambda: None, least_per_s=1.0)
    waits = [pace.hold(0.0) for _ in range(5)]
    assert waits[0] == 0.0 and max(waits) == MAX_HOLD_S


def test_zero_per_answer_never_holds():
    held = Count()
    pace = RefusalPace(0, lambda: 1.0, held)
    assert [pace.hold(0.0) for _ in range(1000)] == [0.0] * 1000 and held.n == 0
