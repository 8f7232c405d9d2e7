"""Batching as a model's config says (issue #42, item 5), against Triton's documentation
(docs/user_guide/batcher.md, "Dynamic Batcher" and "Delayed Batching"; model_configuration.md,
"Default Max Batch Size and Dynamic Batcher")."""

from pathlib import Path

import pytest
from batching import Item

from atoll.config import load_config
from atoll.repository.specs import ModelSpec, TensorSpec
from atoll.supervisor.model_batching import batcher_for, preba_policies, queue_delay_us

CONFIG = load_config(overrides={"batching.max_batch_size": 8})  # [batching] max_queue_delay_microseconds: 5000


def _spec(name="m", dynamic_batching=True, delay_us=None, preferred=()):
    return ModelSpec(name, "1", Path("m.onnx"), "onnxruntime_onnx", 8, [TensorSpec("x", "FP32", (4,))],
                     [TensorSpec("y", "FP32", (4,))], "none", "none", max_queue_delay_microseconds=delay_us,
                     preferred_batch_sizes=preferred, dynamic_batching=dynamic_batching)  # fmt: skip


@pytest.mark.parametrize(("spec", "delay_us"), [
    (_spec(dynamic_batching=False), 0),  # no dynamic_batching: each request runs as it comes
    (_spec(delay_us=0), 0),  # an explicit 0 is honoured ("will not delay when forming batches")
    (_spec(delay_us=250), 250),
    (_spec(), 5000),  # `dynamic_batching { }`: the server's [batching] default
])  # fmt: skip
def test_queue_delay_is_the_configs(spec, delay_us):
    assert queue_delay_us(CONFIG, spec) == delay_us
    assert preba_policies(CONFIG, {"m": spec})["m"].buckets[0].time_knee == pytest.approx(delay_us * 1e-6)


@pytest.mark.parametrize("spec", [_spec(dynamic_batching=False), _spec(delay_us=0)])
def test_a_lone_request_goes_at_once_to_an_idle_vgpu(spec):
    batcher, _, _ = batcher_for(CONFIG, {"m": spec}, {"cpu0": "cpu"}, latency=lambda *a: 0.001)
    batcher.add(Item(1, "m", 1.0, arrival=10.0), 10.0)
    assert batcher.next_deadline() == 10.0
    (dispatch,) = batcher.poll(10.0)
    assert [item.id for item in dispatch.items] == [1]


def test_requests_queued_while_the_vgpu_is_busy_batch_without_delay():
    """Triton's instances pull work: what queued while all were busy forms the next batch."""
    batcher, _, _ = batcher_for(CONFIG, {"m": _spec(delay_us=0)}, {"cpu0": "cpu"}, latency=lambda *a: 0.001)
    batcher.add(Item(1, "m", 1.0, arrival=0.0), 0.0)
    assert len(batcher.poll(0.0)) == 1  # the vGPU is busy from here
    for i in (2, 3, 4):
        batcher.add(Item(i, "m", 1.0, arrival=0.001), 0.001)
    assert batcher.poll(0.002) == []
    batcher.on_complete("cpu0", 0.003)
    (dispatch,) = batcher.poll(0.003)
    assert [item.id for item in dispatch.items] == [2, 3, 4]


def test_the_largest_preferred_batch_size_goes_at_once():
    """batcher.md, "Preferred Batch Sizes": a batch of a preferred size is sent without delay."""
    policy = preba_policies(CONFIG, {"m": _spec(delay_us=100_000, preferred=(2, 4))})["m"]
    assert policy.buckets[0].batch_max == 4
    batcher, _, _ = batcher_for(CONFIG, {"m": _spec(delay_us=100_000, preferred=(2, 4))}, {"cpu0": "cpu"},
                                latency=lambda *a: 0.001)  # fmt: skip
    for i in range(4):
        batcher.add(Item(i, "m", 1.0, arrival=0.0), 0.0)
    assert [len(d.items) for d in batcher.poll(0.0)] == [4]
