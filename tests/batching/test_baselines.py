"""Baseline batchers on simulated time: Triton's dynamic batcher (rules from Triton's model
configuration documentation, `dynamic_batching`) and static batching."""

from __future__ import annotations

import math

import pytest

from batching import (Item, ModelSettings, StaticBatcher, TritonBatcher, TritonConfig, image_model,
                      make_batcher)


def service(model, batch, length, kind):
    return 0.010 + 0.001 * batch * length


def vgpus(n):
    return {f"g{i}": "k" for i in range(n)}


def add(b, n, t=0.0, length=1.0, start=0, model="m"):
    for i in range(start, start + n):
        b.add(Item(i, model, length, t), now=t)


def test_triton_sends_max_batch_size_at_once():
    b = TritonBatcher(vgpus(1), service, max_batch_size=4, max_queue_delay_microseconds=5000)
    add(b, 6)
    [d] = b.poll(0.0)
    assert [it.id for it in d.items] == [0, 1, 2, 3] and d.bucket == "all" and d.batch_max == 4


def test_triton_waits_the_queue_delay_exactly():
    b = TritonBatcher(vgpus(1), service, max_batch_size=8, max_queue_delay_microseconds=5000)
    add(b, 3, t=1.0)
    assert b.next_deadline() == 1.0 + 0.005
    assert b.poll(math.nextafter(1.005, 0)) == []
    [d] = b.poll(1.005)
    assert len(d.items) == 3


def test_triton_zero_delay_sends_whatever_is_queued():
    b = TritonBatcher(vgpus(1), service, max_batch_size=8)
    add(b, 3)
    [d] = b.poll(0.0)
    assert len(d.items) == 3


def test_triton_preferred_sizes():
    b = TritonBatcher(vgpus(2), service, max_batch_size=8, max_queue_delay_microseconds=5000,
                      preferred_batch_sizes=(2, 4))
    add(b, 4)
    [d] = b.poll(0.0)  # exactly a preferred size: goes without waiting
    assert len(d.items) == 4
    add(b, 3, start=4)
    assert b.poll(0.001) == []  # 3 is not preferred: wait for the delay
    [d] = b.poll(0.005)  # then the largest preferred size that fits
    assert [it.id for it in d.items] == [4, 5]


def test_triton_forms_batches_only_on_an_idle_vgpu():
    b = TritonBatcher(vgpus(1), service, max_batch_size=4, max_queue_delay_microseconds=1000)
    add(b, 1)
    [first] = b.poll(0.001)
    add(b, 6, t=0.002, start=1)
    assert b.poll(0.010) == [] and b.next_deadline() is None  # the only vGPU is busy
    b.on_complete("g0", 0.011)
    [d] = b.poll(0.011)  # the queue grew meanwhile: a full batch
    assert len(d.items) == 4 and d.vgpu == "g0"


def test_triton_pads_to_the_longest_input_of_one_queue():
    b = TritonBatcher(vgpus(1), service, max_batch_size=3, max_queue_delay_microseconds=0)
    for i, length in enumerate((2.0, 17.5, 9.0)):
        b.add(Item(i, "asr", length, 0.0), now=0.0)
    [d] = b.poll(0.0)
    assert d.pad_length == 17.5 and len(d.items) == 3


def test_triton_per_model_configuration():
    b = TritonBatcher(vgpus(2), service, max_batch_size=8,
                      per_model={"small": TritonConfig(max_batch_size=2)})
    add(b, 3, model="small")
    add(b, 3, model="big", start=3)
    sizes = sorted((d.model, len(d.items)) for d in b.poll(0.0))
    assert sizes == [("big", 3), ("small", 2)]


def test_triton_config_validation():
    with pytest.raises(ValueError, match="preferred"):
        TritonConfig(max_batch_size=4, preferred_batch_sizes=(8,))


def test_static_waits_for_a_full_batch():
    b = StaticBatcher(vgpus(1), service, batch_size=4)
    add(b, 3)
    assert b.poll(100.0) == [] and b.next_deadline() is None
    add(b, 1, t=1.0, start=3)
    [d] = b.poll(1.0)
    assert len(d.items) == 4 and d.batch_max == 4


def test_static_timeout_flushes_the_tail():
    b = StaticBatcher(vgpus(1), service, batch_size=4, timeout=0.5)
    add(b, 2, t=1.0)
    assert b.next_deadline() == 1.5
    [d] = b.poll(1.5)
    assert len(d.items) == 2


def test_static_places_on_idle_then_earliest_completion():
    b = StaticBatcher(vgpus(2), service, batch_size=1)
    add(b, 3)
    assert [d.vgpu for d in b.poll(0.0)] == ["g0", "g1", "g0"]


def test_single_queue_batchers_add_and_remove_models():
    settings = ModelSettings(image_model(2, 0.01), TritonConfig(2, 0))
    triton = TritonBatcher(vgpus(1), service, max_batch_size=8, max_queue_delay_microseconds=5000)
    static = StaticBatcher(vgpus(1), service, batch_size=2)
    for b in (triton, static):
        b.add_model("m", settings)
        add(b, 2)
        with pytest.raises(ValueError, match="queued"):
            b.remove_model("m")
        [d] = b.poll(0.0)
        assert len(d.items) == 2  # triton: the added model's max_batch_size, not the default 8
        b.remove_model("m")
        assert b.pending() == 0


def test_triton_factory_defaults_to_the_static_settings_without_models():
    b = make_batcher("triton", vgpus(1), service, static_batch=3, static_timeout_s=0.002)
    add(b, 2)
    assert b.poll(0.0) == [] and b.next_deadline() == pytest.approx(0.002)
