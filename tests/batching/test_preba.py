"""PREBA batcher rules on simulated time (the reference is ARCHITECTURE.md section 5, by hand)."""

from __future__ import annotations

import math

import pytest

from batching import (BucketPolicy, Item, ModelBatching, ModelSettings, PrebaBatcher, TritonConfig,
                      audio_bucket_edges, image_model)


def service(model, batch, length, kind):
    return 0.010 + 0.001 * batch * length


def audio(batch_maxes, time_knee=0.035, vgpus=None):
    buckets = tuple(BucketPolicy(2.5 * (k + 1), bm, time_knee) for k, bm in enumerate(batch_maxes))
    return ModelBatching("audio", buckets, vgpus)


def make(batch_maxes=(8, 4, 2), n_vgpus=1, **kw):
    vgpus = {f"g{i}": "k" for i in range(n_vgpus)}
    return PrebaBatcher({"asr": audio(batch_maxes)}, vgpus, service, **kw)


def item(i, length, t=0.0, model="asr"):
    return Item(i, model, length, t)


def test_bucket_edges_are_half_open_on_the_left():
    policy = audio((8, 4, 2))
    assert [policy.bucket_of(x) for x in (0.1, 2.5, 2.5001, 5.0, 7.5)] == [0, 0, 1, 1, 2]
    with pytest.raises(ValueError, match="exceeds the longest profiled bucket"):
        policy.bucket_of(7.6)


def test_full_bucket_dispatches_at_once():
    b = make()
    for i in range(4):
        b.add(item(i, 4.0, t=0.001 * i), now=0.001 * i)
    assert b.next_deadline() == pytest.approx(0.003)
    [d] = b.poll(0.003)
    assert [it.id for it in d.items] == [0, 1, 2, 3]
    assert (d.bucket, d.batch_max, d.pad_length) == (1, 4, 4.0)
    assert b.pending() == 0 and b.next_deadline() is None


def test_full_bucket_sends_batch_max_and_keeps_the_rest():
    b = make()
    for i in range(5):
        b.add(item(i, 6.0), now=0.0)
    # every full batch goes in one poll (the second queued behind the first on the busy vGPU)
    assert [[it.id for it in d.items] for d in b.poll(0.0)] == [[0, 1], [2, 3]]
    # the remainder is short: it waits for an idle vGPU, then for its timeout
    assert b.pending() == 1 and b.next_deadline() is None
    b.on_complete("g0", 0.01)
    b.on_complete("g0", 0.02)
    assert b.next_deadline() == pytest.approx(0.035)


def test_timeout_dispatch_exactly_at_time_queue():
    b = make(n_vgpus=1)
    b.add(item(0, 1.0, t=0.2), now=0.2)
    assert b.next_deadline() == 0.2 + 0.035
    assert b.poll(math.nextafter(0.2 + 0.035, 0)) == []
    [d] = b.poll(0.2 + 0.035)
    assert [it.id for it in d.items] == [0]


@pytest.mark.parametrize("k", [1, 2, 7])
def test_time_queue_is_time_knee_over_serving_vgpus(k):
    b = make(n_vgpus=k)
    assert b.time_queue("asr", 0) == pytest.approx(0.035 / k)
    b.add(item(0, 1.0), now=0.0)
    assert b.next_deadline() == pytest.approx(0.035 / k)


def test_time_queue_counts_only_the_vgpus_serving_the_model():
    vgpus = {f"g{i}": "k" for i in range(7)}
    b = PrebaBatcher({"asr": audio((8,), vgpus=("g0", "g1"))}, vgpus, service)
    assert b.time_queue("asr", 0) == pytest.approx(0.035 / 2)
    b.add(item(0, 1.0), now=0.0)
    [d] = b.poll(1.0)
    assert d.vgpu in ("g0", "g1")


def test_short_batch_tops_up_from_the_shorter_neighbour_first():
    b = make(batch_maxes=(8, 4, 2))
    b.add(item("mid", 4.0, t=0.0), now=0.0)  # bucket 1, times out first
    b.add(item("short", 2.0, t=0.01), now=0.01)  # bucket 0
    b.add(item("long", 6.0, t=0.02), now=0.02)  # bucket 2
    [d] = b.poll(0.035)
    # bucket 1 (limit 4) takes the shorter bucket 0 first; the longer input would lower the limit
    # to bucket 2's Batch_max (2) which the batch, now holding 2, cannot stay under
    assert [it.id for it in d.items] == ["mid", "short"]
    assert d.pad_length == 4.0 and d.batch_max == 4 and d.bucket == 1


def test_longer_neighbour_joins_while_its_batch_max_allows():
    b = make(batch_maxes=(8, 4, 3))
    b.add(item("mid0", 4.0), now=0.0)
    b.add(item("mid1", 4.5), now=0.0)
    for i in range(2):
        b.add(item(f"long{i}", 6.0 + 0.1 * i, t=0.01), now=0.01)
    [d] = b.poll(0.035)
    # a merged batch never exceeds the Batch_max of its longest input (bucket 2: 3)
    assert [it.id for it in d.items] == ["mid0", "mid1", "long0"]
    assert d.batch_max == 3 and d.bucket == 2 and d.pad_length == 6.0


def test_merge_is_nearest_first_and_limited_by_distance():
    b = make(batch_maxes=(8, 8, 8, 8, 8), merge_distance=2)
    b.add(item("k2", 6.0), now=0.0)
    b.add(item("k4", 11.0, t=0.01), now=0.01)
    b.add(item("k0", 1.0, t=0.01), now=0.01)
    b.add(item("k3", 8.0, t=0.02), now=0.02)
    b.add(item("k1", 4.0, t=0.03), now=0.03)
    [d] = b.poll(0.035)
    # distance 1: shorter (k1) then longer (k3); distance 2: shorter (k0) then longer (k4)
    assert [it.id for it in d.items] == ["k2", "k1", "k3", "k0", "k4"]
    assert d.pad_length == 11.0


def test_adjacent_only_by_default():
    b = make(batch_maxes=(8, 8, 8))
    b.add(item("k0", 1.0), now=0.0)
    b.add(item("k2", 6.0, t=0.01), now=0.01)
    [d] = b.poll(0.035)
    assert [it.id for it in d.items] == ["k0"]


def test_full_bucket_is_not_topped_up():
    b = make(batch_maxes=(2, 4))
    b.add(item("a", 1.0), now=0.0)
    b.add(item("b", 4.0), now=0.0)
    b.add(item("c", 1.0), now=0.0)
    [d] = b.poll(0.0)
    assert [it.id for it in d.items] == ["a", "c"]


def test_image_model_has_one_bucket_and_ignores_length():
    b = PrebaBatcher({"cls": image_model(2, 0.010)}, {"g0": "k"}, service)
    b.add(item(0, 1.0, model="cls"), now=0.0)
    b.add(item(1, 123.0, model="cls"), now=0.0)
    [d] = b.poll(0.0)
    assert len(d.items) == 2 and d.bucket == 0


def test_idle_vgpu_first_then_earliest_expected_completion():
    b = make(batch_maxes=(1, 1, 1), n_vgpus=2)
    b.add(item("a", 1.0), now=0.0)
    [da] = b.poll(0.0)  # service 0.011
    b.add(item("b", 6.0), now=0.0)
    [db] = b.poll(0.0)  # service 0.016
    assert (da.vgpu, db.vgpu) == ("g0", "g1")  # the second goes to the idle vGPU
    # both busy: g0 is expected to complete first (0.011 < 0.016)
    b.add(item("c", 1.0), now=0.001)
    [dc] = b.poll(0.001)
    assert dc.vgpu == "g0"
    # g0 now expects 0.022, g1 0.016
    b.add(item("d", 1.0), now=0.002)
    [dd] = b.poll(0.002)
    assert dd.vgpu == "g1"
    # g0 finishes its first batch early but still has "c": g1 (0.027) vs g0 (0.003 + 0.011)
    b.on_complete("g0", 0.003)
    b.add(item("e", 1.0), now=0.004)
    [de] = b.poll(0.004)
    assert de.vgpu == "g0"
    # once g1 completes everything it becomes idle, and idle wins over expected completion
    b.on_complete("g1", 0.005)
    b.on_complete("g1", 0.006)
    b.add(item("f", 1.0), now=0.007)
    [df] = b.poll(0.007)
    assert df.vgpu == "g1"


def test_short_batch_waits_for_an_idle_vgpu_and_keeps_filling():
    b = make(batch_maxes=(1, 4, 2))
    b.add(item("busy", 1.0), now=0.0)
    [first] = b.poll(0.0)  # bucket 0 is full at 1: the only vGPU is now busy
    b.add(item("a", 4.0), now=0.0)
    assert b.poll(0.035) == [] and b.next_deadline() is None  # timed out, but no idle vGPU
    b.add(item("b", 4.0, t=0.04), now=0.04)
    b.on_complete("g0", 0.05)
    [d] = b.poll(0.05)  # the vGPU is idle: the overdue bucket goes with what joined meanwhile
    assert [it.id for it in d.items] == ["a", "b"]


def test_eager_placement_sends_timed_out_batches_to_busy_vgpus():
    b = make(batch_maxes=(1, 4, 2), short_batches_wait_for_idle=False)
    b.add(item("busy", 1.0), now=0.0)
    b.poll(0.0)
    b.add(item("a", 4.0), now=0.0)
    [d] = b.poll(0.035)
    assert [it.id for it in d.items] == ["a"] and d.vgpu == "g0"


def test_unknown_model_and_unknown_completion_are_clear_errors():
    b = make()
    with pytest.raises(ValueError, match="unknown model"):
        b.add(item(0, 1.0, model="nope"), now=0.0)
    with pytest.raises(ValueError, match="none outstanding"):
        b.on_complete("g0", 0.0)
    assert b.pending() == 0


def test_policy_validation():
    with pytest.raises(ValueError, match="bucket edges must increase"):
        ModelBatching("audio", (BucketPolicy(5.0, 4, 0.03), BucketPolicy(2.5, 8, 0.03)))
    with pytest.raises(ValueError, match="exactly one bucket"):
        ModelBatching("image", (BucketPolicy(1.0, 4, 0.03), BucketPolicy(2.0, 4, 0.03)))
    with pytest.raises(ValueError, match="batch_max must be >= 1"):
        audio((0,))
    with pytest.raises(ValueError, match="not in the pool"):
        PrebaBatcher({"asr": audio((4,), vgpus=("g9",))}, {"g0": "k"}, service)
    assert audio_bucket_edges(35.0) == [2.5 * (k + 1) for k in range(14)]
    assert audio_bucket_edges(36.0)[-1] == 37.5 and audio_bucket_edges(1.0) == [2.5]


def test_too_long_input_is_refused_and_not_queued():
    b = make(batch_maxes=(8, 4, 2))
    with pytest.raises(ValueError, match="exceeds the longest profiled bucket"):
        b.add(item(0, 9.0), now=0.0)
    assert b.pending() == 0 and b.next_deadline() is None


def test_a_vgpu_with_two_slots_runs_two_batches_at_once():
    """A CPU vGPU runs a batch per core: with two slots it takes a second (short) batch while the
    first runs, and only a third one waits for a slot."""
    b = PrebaBatcher({"asr": audio((2, 2, 2))}, {"g0": "k"}, service, slots={"g0": 2})
    b.add(item(0, 1.0), 0.0)
    [first] = b.poll(0.1)  # timed out, the vGPU idle: goes alone
    b.add(item(1, 1.0, 0.1), 0.1)
    [second] = b.poll(0.2)  # a slot is still free: goes too
    b.add(item(2, 1.0, 0.2), 0.2)
    assert b.poll(0.3) == [] and b.next_deadline() is None  # both slots busy: it waits
    b.on_complete("g0", 0.35)
    [third] = b.poll(0.35)
    assert [len(d.items) for d in (first, second, third)] == [1, 1, 1]
    assert {d.vgpu for d in (first, second, third)} == {"g0"}


def test_models_come_and_go_while_it_runs():
    b = PrebaBatcher({}, {"g0": "k"}, service)
    with pytest.raises(ValueError, match="unknown model"):
        b.add(item(0, 1.0), 0.0)
    b.add_model("asr", ModelSettings(audio((2,)), TritonConfig(2)))
    b.add(item(1, 1.0), 0.0)
    with pytest.raises(ValueError, match="queued"):
        b.remove_model("asr")  # its item would be lost
    b.add(item(2, 1.0), 0.0)
    [d] = b.poll(0.0)
    assert [it.id for it in d.items] == [1, 2]
    b.remove_model("asr")
    with pytest.raises(ValueError, match="unknown model"):
        b.add(item(3, 1.0), 0.0)
