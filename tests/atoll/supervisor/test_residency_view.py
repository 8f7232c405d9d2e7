"""The dispatcher's residency view (docs/residency.md) replays the workers' decisions: what each
load reported, then each dispatched batch switching its model in with the same policy."""

from __future__ import annotations

import pytest

from gpu_runtime.residency.pool import aligned
from gpu_runtime.residency.settings import ResidencySettings

from atoll.supervisor.residency_view import ResidencyView

MB = 1 << 20


def test_the_view_follows_loads_dispatches_and_completions():
    settings = ResidencySettings(budget_bytes=2 * aligned(MB), bandwidth=1e9)
    view = ResidencyView(settings, ["cpu0"])
    for i, resident in enumerate((True, True, False)):
        view.add(f"m{i}", {"cpu0": {"residency": {"weight_bytes": MB, "groups": 4, "resident": resident}}})
    view.add("ort", {"cpu0": {"executor": "onnxruntime"}})  # not under residency: never a switch
    assert [view.switch_time(m, "cpu0") for m in ("m0", "m1", "ort")] == [0.0, 0.0, 0.0]
    assert view.switch_time("m2", "cpu0") == pytest.approx(MB / 1e9 + 4 * 10e-6)
    view.dispatched("m1", "cpu0", real_time=False)
    view.dispatched("m2", "cpu0", real_time=False)  # m1 is busy: m0 leaves
    assert view.switch_time("m2", "cpu0") == 0.0 and view.switch_time("m0", "cpu0") > 0
    view.completed("m1", "cpu0")
    view.completed("m2", "cpu0")
    view.dispatched("m0", "cpu0", real_time=False)  # m1, the least recently used, leaves
    assert view.switch_time("m1", "cpu0") > 0 and view.switch_time("m2", "cpu0") == 0.0
    view.remove("m1")
    assert view.switch_time("m1", "cpu0") == 0.0


def test_the_view_counts_a_virtual_pools_footprint():
    """With a virtual pool (GPUs, the CUDA emulator) a model takes its weights and arenas: two
    models of 1 MB weights but 1.5 MB footprints do not share a 2 MB budget."""
    view = ResidencyView(ResidencySettings(budget_bytes=2 * MB, bandwidth=1e9), ["gpu0"])
    for i, resident in enumerate((True, False)):
        view.add(f"m{i}", {"gpu0": {"residency": {"weight_bytes": MB, "footprint": 3 * MB // 2, "groups": 2,
                                                  "resident": resident}}})
    assert view.switch_time("m1", "gpu0") == pytest.approx(MB / 1e9 + 2 * 10e-6)  # the weights move
    view.dispatched("m1", "gpu0", real_time=False)  # m0 must leave for it
    assert view.switch_time("m0", "gpu0") > 0 and view.switch_time("m1", "gpu0") == 0.0
