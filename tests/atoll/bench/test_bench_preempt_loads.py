"""`atoll bench preempt --be-load idle,saturate --short` end to end on a CPU vGPU: rt-only once,
each policy under each BE load with its p50/p99/p99.9 and its RT overhead over rt-only."""

import argparse
import json

import pytest

from atoll.bench import preempt


def _run(*argv) -> int:
    parser = argparse.ArgumentParser()
    preempt.register(parser.add_subparsers())
    args = parser.parse_args(["preempt", *argv])
    return args.func(args)


def test_saturate_beside_idle_with_percentiles_and_overhead(tmp_path):
    out = tmp_path / "preempt.json"
    assert _run("--policy", "rt-only,reset", "--be-load", "idle,saturate", "--short",
                "--out", str(out)) == 0
    doc = json.loads(out.read_text())
    assert doc["models"] == {"rt": "mobilenet_v3_small",
                             "be": {"idle": {"mobilenet_v3_small": 1},
                                    "saturate": {"mobilenet_v3_small": 2, "conformer": 2}}}
    assert doc["rt_requests_per_policy"] == preempt.SHORT["n"]
    rows = {(r["policy"], r["be_load"]): r for r in doc["results"]}
    assert list(rows) == [("rt-only", "none"), ("reset", "idle"), ("reset", "saturate")]
    alone = rows["rt-only", "none"]["rt_latency_ms"]
    for r in rows.values():
        lat = r["preempt_latency_us"]
        assert lat["n"] == preempt.SHORT["n"]
        assert 0 < lat["p50"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]
        assert r["rt_overhead"] == round(r["rt_latency_ms"] / alone - 1, 4)
    assert rows["rt-only", "none"]["be_completed"] == 0


def test_an_unknown_load_names_the_choices():
    with pytest.raises(SystemExit, match="choose from idle, saturate"):
        _run("--be-load", "busy")
