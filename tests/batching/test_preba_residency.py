"""PREBA with residency (docs/residency.md): a model no vGPU holds waits its switch longer in
Time_queue, so one switch serves a fuller batch; held models' buckets go first; a batch goes to an
idle vGPU that holds its model. Simulated time, an injected switch cost."""

from __future__ import annotations

import pytest

from batching import Item, PrebaBatcher, image_model


def service(model, batch, length, kind):
    return 0.010


def make(held: dict[str, set[str]], n_vgpus=1, switch_s=0.020):
    vgpus = {f"g{i}": "k" for i in range(n_vgpus)}
    models = {m: image_model(8, 0.010) for m in ("a", "b")}
    return PrebaBatcher(models, vgpus, service,
                        switch_time=lambda m, v: 0.0 if m in held.get(v, ()) else switch_s)


def test_a_model_held_nowhere_waits_its_switch_longer():
    b = make({"g0": {"a"}})
    b.add(Item(1, "a", 1.0, 0.0), 0.0)
    b.add(Item(2, "b", 1.0, 0.0), 0.0)
    assert b.next_deadline() == pytest.approx(0.010)
    assert [d.model for d in b.poll(0.010)] == ["a"]
    b.on_complete("g0", 0.011)
    assert b.next_deadline() == pytest.approx(0.030)  # Time_queue 10 ms + the 20 ms switch
    b.add(Item(3, "b", 1.0, 0.02), 0.02)
    assert b.poll(0.029) == []
    (dispatch,) = b.poll(0.030)
    assert dispatch.model == "b" and len(dispatch.items) == 2  # one switch, two requests


def test_held_models_go_first_among_due_buckets():
    b = make({"g0": {"b"}}, n_vgpus=2)
    b.add(Item(1, "a", 1.0, 0.0), 0.0)  # due at 0.030 (with its switch)
    b.add(Item(2, "b", 1.0, 0.021), 0.021)  # due at 0.031, but held
    assert [d.model for d in b.poll(0.031)] == ["b", "a"]


def test_a_batch_goes_to_the_idle_vgpu_holding_its_model():
    b = make({"g1": {"a"}}, n_vgpus=2)
    b.add(Item(1, "a", 1.0, 0.0), 0.0)
    (dispatch,) = b.poll(0.010)
    assert dispatch.vgpu == "g1"
