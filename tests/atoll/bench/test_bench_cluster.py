"""`atoll bench serve --cluster N`: the cores per party and the endpoint's cost on synthetic rows, and
one short run through a real one-node local Ray cluster (skipped where Ray, the cluster extra, is
absent; no speed asserted)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from atoll.bench import cluster_bench

MODEL = "mobilenet_v3_small"
RUN_TIMEOUT_S = 400  # the cluster's start (~30 s on the loaded 2-core VM) and 2 x 3 s of load, with room


def _row(server: str, rps: float, p50: float, p99: float, cpu: dict, concurrency: int = 8) -> dict:
    return {"server": server, "input": "tensor", "protocol": "http", "shm": False, "mode": "closed",
            "concurrency": concurrency, "rate_rps": None, "throughput_rps": rps,
            "latency_ms": {"p50": p50, "p99": p99}, "cpu_cores": dict(cpu), "loadgen": {"saturated": False}}  # fmt: skip


def test_cores_count_each_party_once_and_the_endpoint_cost_is_against_the_node():
    # CpuMeter's view: Ray's tree holds the nodes; "other" was machine less every party as given
    cpu = {"endpoint": 0.1, "load": 0.2, "node a": 0.5, "node b": 0.4, "ray": 1.0, "other": 0.0, "machine": 1.95}
    cores = cluster_bench.separated(cpu)
    assert cores == {"server": 1.1, "endpoint": 0.1, "nodes": 0.9, "per_node": {"a": 0.5, "b": 0.4}, "ray": 0.1,
                     "load": 0.2, "other": 0.65, "machine": 1.95}  # fmt: skip
    assert cluster_bench.separated(dict.fromkeys(cpu))["server"] is None  # no /proc: every figure None
    row = _row("atoll-cluster-2", 100.0, 12.0, 30.0, cores)
    node = _row("atoll-node", 110.0, 10.5, 33.0, {"server": 0.5, "load": 0.2, "other": 0.0, "machine": 1.0})
    cost = cluster_bench.endpoint_cost(row, node)
    assert cost == {"cpu_ms_per_request": 1.0, "added_p50_ms": 1.5, "added_p99_ms": -3.0, "direct_p50_ms": 10.5,
                    "direct_p99_ms": 33.0, "direct_throughput_rps": 110.0}  # fmt: skip
    assert cluster_bench.endpoint_cost(row, None)["added_p50_ms"] is None


def test_scaling_compares_each_cluster_with_the_smallest_at_the_same_point():
    rows = []
    for nodes, rps in ((1, 50.0), (2, 85.0)):
        for concurrency in (8, 16):
            row = _row(f"atoll-cluster-{nodes}", rps * concurrency / 8, 10.0, 20.0, {"nodes": 0.5 * nodes}, concurrency)
            row.update(cluster_nodes=nodes, endpoint={"cpu_ms_per_request": 0.8})
            rows += [row, {**row, "server": "atoll-node", "throughput_rps": 1.0}]  # the direct rows are not compared
    rows.append({**rows[0], "concurrency": 4})  # a point the 2-node cluster did not run
    out = cluster_bench.scaling(rows)
    assert [(s["concurrency"], s["nodes"], s["throughput_rps"], s["ratio"]) for s in out] == [
        (8, [1, 2], [50.0, 85.0], 1.7), (16, [1, 2], [100.0, 170.0], 1.7)]
    assert [(s["per_node_core_rps"], s["per_node_core_ratio"]) for s in out] == [([100.0, 85.0], 0.85),
                                                                                 ([200.0, 170.0], 0.85)]
    assert cluster_bench.counts("2,1,2") == [2, 1]
    with pytest.raises(SystemExit):
        cluster_bench.counts("0")


def test_without_ray_the_cluster_says_so(monkeypatch):
    def no_ray(nodes):
        raise ModuleNotFoundError("No module named 'ray'")

    monkeypatch.setattr(cluster_bench, "local_cluster", no_ray)
    with pytest.raises(RuntimeError, match="Ray is not installed"), cluster_bench.cluster(1, [], False, ()):
        pass


def test_bench_serve_through_a_one_node_cluster(tmp_path):
    pytest.importorskip("ray", reason="ray is not installed (the cluster extra)")
    out = tmp_path / "cluster.json"
    done = subprocess.run([sys.executable, "-m", "atoll", "bench", "serve", "--cluster", "1", "--input", "tensor",
                           "--concurrency", "2", "--duration", "2", "--warmup", "1", "--no-ideal",
                           "--device", "test", "--out", str(out)],
                          check=False, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["skipped"] == {} and doc["config"]["cluster"] == "1"
    endpoint, direct = doc["results"]
    assert (endpoint["server"], direct["server"]) == ("atoll-cluster-1", "atoll-node")
    assert endpoint["cluster_nodes"] == direct["cluster_nodes"] == 1
    for row in (endpoint, direct):
        assert row["errors"] == {} and row["requests"] > 0 and row["latency_ms"]["p50"] > 0
    cost, cpu = endpoint["endpoint"], endpoint["cpu_cores"]
    assert cost["cpu_ms_per_request"] > 0 and cpu["endpoint"] > 0 and cpu["nodes"] > 0
    assert cost["cpu_ms_per_request"] == pytest.approx(1000 * cpu["endpoint"] / endpoint["throughput_rps"], rel=1e-2)
    assert cost["direct_p50_ms"] == direct["latency_ms"]["p50"] > 0
    assert cost["added_p50_ms"] == pytest.approx(endpoint["latency_ms"]["p50"] - direct["latency_ms"]["p50"], abs=0.02)
    assert cost["added_p99_ms"] == pytest.approx(endpoint["latency_ms"]["p99"] - direct["latency_ms"]["p99"], abs=0.02)
    (name,) = cpu["per_node"]
    assert direct["cpu_cores"]["server"] > 0 and endpoint["cluster"]["node_cores"][name]
    assert doc["cluster_scaling"] == []  # one cluster size: nothing to compare
