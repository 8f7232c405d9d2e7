"""Discrete-event simulator: queueing-theory references, exactly-once delivery, determinism.

References: the M/D/1 mean waiting time (Pollaczek-Khinchine formula), and for uniform arrivals
slower than service, a latency equal to the service time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from batching import PrebaBatcher, StaticBatcher, TritonBatcher, image_model
from batching.profile import load_profile, service_time_from
from batching.sim import simulate
from batching.sweep import max_rate_at_slo, parse_rates
from batching.workload import arrival_times, input_lengths, librispeech_lengths

PROFILE = Path(__file__).resolve().parents[2] / "batching" / "profiles" / "a100-1g.5gb.json"


def constant(seconds):
    return lambda model, batch, length, kind: seconds


def test_single_server_unbatched_matches_md1():
    service, rate, duration = 0.004, 150.0, 200.0  # rho = 0.6
    rng = np.random.default_rng(1)
    arrivals = arrival_times("poisson", rate, duration, rng)
    b = PrebaBatcher({"m": image_model(1, 0.01)}, {"g0": "k"}, constant(service))
    r = simulate(b, "m", arrivals, np.ones(len(arrivals)), {"g0": "k"}, constant(service), duration)
    rho = rate * service
    md1_wait = rho * service / (2 * (1 - rho))  # Pollaczek-Khinchine, deterministic service
    assert r.latency_ms["mean"] == pytest.approx((service + md1_wait) * 1e3, rel=0.05)
    assert r.vgpu_utilisation == pytest.approx(rho, rel=0.03)
    assert r.mean_batch_size == 1.0


def test_uniform_arrivals_below_capacity_see_the_service_time():
    arrivals = arrival_times("uniform", 50.0, 2.0, np.random.default_rng(0))
    b = StaticBatcher({"g0": "k"}, constant(0.01), batch_size=1)
    r = simulate(b, "m", arrivals, np.ones(len(arrivals)), {"g0": "k"}, constant(0.01), 2.0)
    assert r.latency_ms["p50"] == pytest.approx(10.0) and r.latency_ms["p99"] == pytest.approx(10.0)
    assert r.throughput_rps == pytest.approx(50.0) and r.completed == 100


class Recording:
    """Wraps a batcher and records every dispatch it makes."""

    def __init__(self, inner):
        self.inner, self.dispatches = inner, []

    def poll(self, now):
        out = self.inner.poll(now)
        self.dispatches += out
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _batchers(profile, vgpus, st):
    policy = {"conformer": profile.model_batching("conformer")}
    return {
        "preba": lambda: PrebaBatcher(policy, vgpus, st),
        "preba-eager": lambda: PrebaBatcher(policy, vgpus, st, short_batches_wait_for_idle=False),
        "triton": lambda: TritonBatcher(vgpus, st, 64, 40000, preferred_batch_sizes=(16, 32)),
        "static": lambda: StaticBatcher(vgpus, st, 8, timeout=0.5),
    }


@pytest.mark.parametrize("name", ["preba", "preba-eager", "triton", "static"])
def test_every_item_dispatched_exactly_once_under_load(name):
    profile = load_profile(PROFILE)
    vgpus = {f"v{i}": profile.kind for i in range(3)}
    st = service_time_from({profile.kind: profile})
    rng = np.random.default_rng(7)
    arrivals = arrival_times("poisson", 900.0, 3.0, rng)  # past the capacity of 3 slices
    lengths = librispeech_lengths(len(arrivals), rng)
    b = Recording(_batchers(profile, vgpus, st)[name]())
    r = simulate(b, "conformer", arrivals, lengths, vgpus, st, 3.0)
    ids = sorted(item.id for d in b.dispatches for item in d.items)
    assert ids == list(range(len(arrivals))) and r.completed == len(arrivals)
    assert all(len(d.items) <= d.batch_max for d in b.dispatches)
    assert all(d.pad_length == max(i.length for i in d.items) for d in b.dispatches)


def test_simulation_is_deterministic_for_a_seed():
    profile = load_profile(PROFILE)
    vgpus = {f"v{i}": profile.kind for i in range(7)}
    st = service_time_from({profile.kind: profile})

    def once(seed):
        rng = np.random.default_rng(seed)
        arrivals = arrival_times("poisson", 800.0, 2.0, rng)
        lengths = input_lengths("librispeech", len(arrivals), rng)
        b = PrebaBatcher({"conformer": profile.model_batching("conformer")}, vgpus, st)
        return simulate(b, "conformer", arrivals, lengths, vgpus, st, 2.0, 0.2).to_json()

    assert once(3) == once(3)
    assert once(3) != once(4)


def test_librispeech_lengths_follow_the_documented_shape():
    x = librispeech_lengths(200_000, np.random.default_rng(0))
    assert x.min() >= 1.0 and x.max() <= 35.0
    assert x.mean() == pytest.approx(12.3, abs=0.1)  # LibriSpeech train: 960 h / ~281k utterances
    assert 0.6 < np.mean((x >= 10) & (x <= 16.7)) < 0.8


def test_workload_and_sweep_errors_and_helpers():
    with pytest.raises(ValueError, match="lengths must be"):
        input_lengths("fixed:abc", 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match="arrival must be one of"):
        arrival_times("bursty", 1.0, 1.0, np.random.default_rng(0))
    assert list(input_lengths("fixed:2.5", 2, np.random.default_rng(0))) == [2.5, 2.5]
    assert parse_rates("100:300:100") == [100.0, 200.0, 300.0]
    with pytest.raises(ValueError, match="START:STOP:STEP"):
        parse_rates("100-300")
    # the highest rate before the first violation; a later pass is not capacity
    assert max_rate_at_slo([1, 2, 3, 4], [10, 20, 200, 50], 100) == 2
    assert max_rate_at_slo([1, 2], [500, 50], 100) is None
