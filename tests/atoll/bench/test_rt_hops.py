"""The front end's hops for the real-time bound (atoll/bench/rt_hops.py): a served near-empty
model's real-time requests over HTTP, each answered (a request that fails raises)."""

from atoll.bench.rt_hops import round_trips


def test_round_trips_time_every_real_time_request_through_a_served_model():
    times = round_trips("cpu", 5)
    assert len(times) == 5 and all(t > 0 for t in times)
