"""RT placement: fewest RT batches in flight, then least other work, then preference order."""

from __future__ import annotations

import pytest

from batching import RtPlacement


def test_spreads_concurrent_rt_batches_and_prefers_the_first_vgpu():
    p = RtPlacement(["g0", "g1"])
    assert p.place() == "g0"
    assert p.place() == "g1"  # g0 already runs one RT batch: a second would wait for it
    assert p.place() == "g0"
    p.complete("g0")
    p.complete("g0")
    assert (p.in_flight("g0"), p.in_flight("g1")) == (0, 1)
    assert p.place() == "g0"


def test_ties_go_to_the_vgpu_with_less_other_work():
    p = RtPlacement(["g0", "g1", "g2"])
    assert p.place(load={"g0": 3, "g1": 1, "g2": 1}) == "g1"
    assert p.place(names=["g0", "g1"], load={"g0": 3, "g1": 1}) == "g0"  # g1 has an RT batch now


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="at least one vGPU"):
        RtPlacement([])
    p = RtPlacement(["g0"])
    with pytest.raises(ValueError, match="unknown"):
        p.place(names=["g9"])
    with pytest.raises(ValueError, match="none in flight"):
        p.complete("g0")
