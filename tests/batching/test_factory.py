"""The batcher registry: one dict of kinds, each building its batcher from one settings object,
an unknown name listing the choices, and each kind's largest batch and knobs."""

from __future__ import annotations

import pytest

from batching import (BATCHERS, DEFAULT_BATCHER, BatcherSettings, BucketPolicy, ModelBatching, ModelSettings,
                      PrebaBatcher, StaticBatcher, TritonBatcher, TritonConfig, make_batcher)
from batching.factory import VARIANTS, batcher_kind, variant

VGPUS = {"v0": "cpu", "v1": "cpu"}
POLICY = ModelBatching("audio", (BucketPolicy(2.5, 8, 0.010), BucketPolicy(5.0, 4, 0.020)))
SETTINGS = BatcherSettings(policies={"m": POLICY}, triton={"m": TritonConfig(16, 3000)},
                           static_batch=5, static_timeout_s=0.25)


def service(model, batch, length, kind):
    return 0.001 * batch


def test_every_kind_builds_its_batcher():
    built = {name: type(make_batcher(name, VGPUS, service, SETTINGS)) for name in BATCHERS}
    assert built == {"preba": PrebaBatcher, "triton": TritonBatcher, "static": StaticBatcher}
    assert DEFAULT_BATCHER in BATCHERS
    # keyword settings, as the supervisor passes them
    assert isinstance(make_batcher("static", VGPUS, service, static_batch=2), StaticBatcher)


def test_an_unknown_batcher_lists_the_choices():
    with pytest.raises(ValueError, match="unknown batcher 'fifo'; choose from preba, triton, static"):
        make_batcher("fifo", VGPUS, service, SETTINGS)


def test_missing_settings_are_named():
    with pytest.raises(ValueError, match="static batcher needs a batch size"):
        make_batcher("static", VGPUS, service, BatcherSettings())
    with pytest.raises(ValueError, match="TritonConfig per model or a static_batch"):
        make_batcher("triton", VGPUS, service, BatcherSettings())


def test_largest_batch_and_knobs_per_kind():
    model = ModelSettings(POLICY, TritonConfig(12))
    assert {n: k.largest_batch(model, SETTINGS) for n, k in BATCHERS.items()} == {
        "preba": 8, "triton": 12, "static": 5}
    assert {n: k.knobs(SETTINGS, "m", 2) for n, k in BATCHERS.items()} == {
        "preba": {"batch_max": [8, 4], "time_queue_ms": [5.0, 10.0]},
        "triton": {"max_batch_size": 16, "max_queue_delay_microseconds": 3000},
        "static": {"batch_size": 5, "timeout_ms": 250.0},
    }


def test_a_variant_is_a_kind_with_settings_overridden():
    [name] = VARIANTS
    kind, settings = variant(name, SETTINGS)
    assert kind is batcher_kind(VARIANTS[name][0]) and settings.short_batches_wait_for_idle is False
    assert variant(DEFAULT_BATCHER, SETTINGS) == (BATCHERS[DEFAULT_BATCHER], SETTINGS)
