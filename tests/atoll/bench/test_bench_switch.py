"""`atoll bench switch` (docs/residency.md): a short run of the switching configuration writes its
figures (requests answered, switches counted, per-switch probes); the Triton-style client unloads
only idle models, least recently used first, and only as many as the incoming model needs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from atoll.bench.switch import ExplicitLoads


def test_explicit_loads_unload_idle_least_recently_used_first():
    loads = ExplicitLoads("http://unused", {"a": 4, "b": 4, "c": 4, "d": 8}, budget=12, loaded=["a", "b", "c"])
    loads.busy["a"] = 1
    assert loads._victims("d") == ["b", "c"]  # a is busy; b and c free 8
    loads.busy["b"] = 1
    assert loads._victims("d") is None  # only c is idle: not enough


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_bench_switch_short_run(tmp_path):
    out = tmp_path / "switch.json"
    subprocess.run([sys.executable, "-m", "atoll", "bench", "switch", "--short", "--runs", "switch", "--out", str(out)],
                   check=True, capture_output=True, timeout=540)
    doc = json.loads(out.read_text())
    run = doc["runs"]["switch"]
    assert doc["setup"]["weights_mb"] == pytest.approx(3 * doc["setup"]["budget_mb"], rel=0.01)
    assert run["errors"] == 0 and run["requests"] == 40 and run["switches"] > 0
    assert run["per_switch"]["switches"] == 2
    assert {"startup_ms", "duration_ms", "total_overhead_ms", "transfer_ms"} <= run["per_switch"].keys()
