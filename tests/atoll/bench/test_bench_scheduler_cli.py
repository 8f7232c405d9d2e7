"""`atoll bench preempt|disb` end to end on a CPU vGPU: the JSON shapes the issue names."""

import json
import subprocess
import sys


def _run(*args):
    subprocess.run([sys.executable, "-m", "atoll", "bench", *args], check=True, timeout=300,
                   capture_output=True, text=True)  # fmt: skip


def test_preempt_json(tmp_path):
    out = tmp_path / "preempt.json"
    _run("preempt", "--policy", "reset", "--n", "5", "--out", str(out))
    doc = json.loads(out.read_text())
    assert doc["device"].startswith("cpu")
    (r,) = doc["results"]
    assert r["policy"] == "reset" and r["preempt_latency_us"]["n"] == 5
    assert 0 < r["preempt_latency_us"]["p50"] <= r["preempt_latency_us"]["p99"] <= r["preempt_latency_us"]["max"]
    assert r["restore_overhead_us"] >= 0


def test_disb_json_and_plot(tmp_path):
    out, plot = tmp_path / "disb.json", tmp_path / "disb.png"
    _run("disb", "--workload", "A", "--policy", "reset", "--duration", "2", "--rounds", "1",
         "--out", str(out), "--plot", str(plot))  # fmt: skip
    doc = json.loads(out.read_text())
    assert doc["workload"] == "A"
    assert [r["policy"] for r in doc["results"]] == ["reset"]
    for r in doc["results"]:
        assert r["rt_latency_ms"]["p50"] <= r["rt_latency_ms"]["p99"]
        assert r["throughput_rps"]["overall"] >= r["throughput_rps"]["be"] >= 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_worker_json(tmp_path):
    """`bench worker`: RT batches through a real vGPU worker process while BE batches run."""
    out = tmp_path / "worker.json"
    _run("worker", "--policy", "reset", "--n", "4", "--be-batch", "2", "--out", str(out))
    doc = json.loads(out.read_text())
    assert doc["device"].startswith("cpu") and doc["be_batch"] == 2
    (r,) = doc["results"]
    assert r["policy"] == "reset" and r["rt_latency_ms"]["n"] == 4
    assert 0 < r["rt_latency_ms"]["p50"] <= r["rt_latency_ms"]["p99"] <= r["rt_latency_ms"]["max"]
    assert r["be_rows_per_s"] > 0 and r["be_batch_alone_ms"] > 0
