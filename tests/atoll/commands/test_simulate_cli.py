"""`atoll simulate`: JSON report shape, determinism, side-by-side sweep, plot, clear errors.

The acceptance sweep itself (PREBA vs Triton at a p95 SLO) is a benchmark-sized run documented in
batching/README.md; here short runs check the command's contract.
"""

from __future__ import annotations

import json
from pathlib import Path

from atoll.cli import main

PROFILE = str(Path(__file__).resolve().parents[3] / "batching" / "profiles" / "a100-1g.5gb.json")


def _run(capsys, *extra):
    code = main(["simulate", "--profile", PROFILE, "--model", "conformer", "--duration", "2",
                 "--json", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_single_run_reports_the_documented_metrics(capsys):
    code, out, _ = _run(capsys, "--rate", "500", "--seed", "1")
    assert code == 0
    report = json.loads(out)
    assert list(report["batchers"]) == ["preba"]
    [r] = report["batchers"]["preba"]["runs"]
    assert set(r) >= {"rate_rps", "throughput_rps", "latency_ms", "mean_batch_size", "vgpu_utilisation"}
    assert set(r["latency_ms"]) >= {"p50", "p95", "p99"}
    assert r["latency_ms"]["p50"] <= r["latency_ms"]["p95"] <= r["latency_ms"]["p99"]
    assert 0 < r["vgpu_utilisation"] <= 1 and r["mean_batch_size"] >= 1
    assert report["batchers"]["preba"]["params"]["time_queue_ms"][0] > 0
    # same seed, same numbers
    assert _run(capsys, "--rate", "500", "--seed", "1")[1] == out


def test_sweep_runs_all_batchers_side_by_side_with_a_plot(capsys, tmp_path):
    plot = tmp_path / "sweep.png"
    code, out, _ = _run(capsys, "--sweep", "--rates", "200:600:200", "--slo-ms", "150",
                        "--plot", str(plot))
    assert code == 0
    report = json.loads(out)
    assert list(report["batchers"]) == ["preba", "triton", "static"]
    assert report["slo_ms"] == 150
    for entry in report["batchers"].values():
        assert [r["rate_rps"] for r in entry["runs"]] == [200.0, 400.0, 600.0]
        assert "max_rate_at_slo_rps" in entry
    triton = report["batchers"]["triton"]["params"]
    assert triton["max_batch_size"] == 64  # the largest Batch_knee of conformer in the profile
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_text_table_without_json(capsys):
    assert main(["simulate", "--profile", PROFILE, "--model", "swin_t", "--rate", "100",
                 "--duration", "1", "--batcher", "triton"]) == 0
    out = capsys.readouterr().out
    assert "swin_t on 7 x a100-1g.5gb" in out and "triton" in out


def test_errors_are_one_line(capsys, tmp_path):
    code, _, err = _run(capsys, "--rate", "10", "--lengths", "gauss")
    assert code == 2 and err.strip() == "atoll simulate: lengths must be 'librispeech' or " \
                                        "'fixed:SECONDS', not 'gauss'"
    code, _, err = _run(capsys)
    assert code == 2 and "give --rate, or --sweep" in err
    assert main(["simulate", "--profile", str(tmp_path / "none.json"), "--model", "x",
                 "--rate", "1"]) == 2
    assert "cannot read profile" in capsys.readouterr().err
    code, _, err = _run(capsys, "--rate", "10", "--model", "bert")
    assert code == 2 and "has no model 'bert'" in err
