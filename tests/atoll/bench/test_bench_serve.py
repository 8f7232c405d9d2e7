"""`atoll bench serve`: its arithmetic on synthetic records, the sweep on a fake server, the traffic
it sends, and one short run end to end against the plain baseline server (no speed asserted)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import onnxruntime as ort
import pytest
from fpga_host import cpu_backend
from gpu_runtime.zoo import build
from tests.atoll.probes import alive, until, zoo_repository

from atoll.bench import serve, servers, triton_baseline
from atoll.bench import serve_analysis as analysis
from atoll.bench import traffic as traffic_mod
from atoll.bench.bodies import http_body, infer_body, tensor_body
from atoll.bench.corpus import jpeg_bytes
from atoll.bench.cpustat import CpuMeter, descendants
from atoll.bench.loadproc import CONNECTION, RECORD, TIMEOUT, LoadPlan, LoadProcesses, split
from atoll.supervisor.server_process import ServerProcess
from atoll.cli import build_parser
from atoll.kserve.protocol import HEADER_LENGTH, decode_request
from atoll.repository.specs import load_repository

MODEL = "mobilenet_v3_small"


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return zoo_repository(tmp_path_factory.mktemp("repo"), MODEL)


def _records(rows) -> np.ndarray:
    return np.array(rows, dtype=RECORD)


def test_summarise_counts_the_window_only():
    recs = _records([
        (0, 0.5, 0.5, 0.6, 200),    # scheduled before the window: warm-up, not counted
        (0, 1.0, 1.001, 1.010, 200),  # 10 ms
        (0, 1.5, 1.5, 1.530, 200),  # 30 ms
        (1, 2.0, 2.004, 2.020, 200),  # rt: 20 ms, sent 4 ms late
        (0, 2.5, 2.5, 2.6, 503),
        (1, 2.9, 2.9, 3.5, 200),    # answered after the window: latency yes, throughput no
        (0, 2.95, 2.95, 60.0, TIMEOUT),
        (0, 3.0, 3.0, 3.1, 200),    # scheduled at the window's end: outside
    ])  # fmt: skip
    row = analysis.summarise(recs, ("m/be", "m/rt"), (1.0, 3.0), rate=4.0)
    assert row["rate_rps"] == 4.0 and row["requests"] == 6
    assert row["throughput_rps"] == 1.5  # three answers inside [1, 3)
    assert row["errors"] == {"timeout": 1, "503": 1}
    assert row["latency_ms"]["n"] == 4 and row["latency_ms"]["max"] == 600.0
    assert row["per_class"]["m/rt"]["latency_ms"]["p50"] == pytest.approx(310.0)
    assert row["per_class"]["m/rt"]["throughput_rps"] == 0.5
    assert row["per_class"]["m/be"]["errors"] == {"timeout": 1, "503": 1}
    assert row["loadgen"]["sent_ratio"] == 1.0 and row["loadgen"]["lateness_ms"]["max"] == 4.0
    assert not analysis.meets(row, slo_ms=1000)  # 2 errors in 6 requests
    assert analysis.CLIENT_ERRORS[CONNECTION] == "connection"


def _fake_row(rate: float, capacity: float = 100.0) -> dict:
    """A server that meets a 100 ms p99 up to `capacity` and falls over past it."""
    ok = rate <= capacity
    return {"rate_rps": rate, "throughput_rps": rate if ok else capacity, "requests": 1000,
            "errors": {}, "latency_ms": {"p99": 40.0 + 50 * rate / capacity if ok else 2000.0}}


@pytest.mark.parametrize("start", [10.0, 60.0, 150.0, 400.0])
def test_sweep_brackets_then_bisects_the_capacity(start):
    measured = []

    def measure(rate):
        measured.append(rate)
        return _fake_row(rate)

    rows, best = analysis.sweep(measure, start, slo_ms=100.0, grow=1.25, refine=3, max_points=20)
    assert [r["rate_rps"] for r in rows] == measured
    failing = min(r for r in measured if r > 100)
    assert best <= 100 < failing
    assert failing - best <= (failing / 1.25 if start < 100 else failing) / 8 + 1e-9  # 3 bisections
    assert best == max(r for r in measured if r <= 100)


def test_sweep_reports_none_when_nothing_meets_and_stops_at_max_points():
    rows, best = analysis.sweep(lambda r: _fake_row(r, capacity=0.1), 50.0, slo_ms=100.0, max_points=4)
    assert best is None and len(rows) == 4


def test_loadgen_saturation_is_behind_schedule_or_busy_processes():
    row = {"rate_rps": 10.0, "loadgen": {"sent_ratio": 1.0, "lateness_ms": {"p50": 1.0}},
           "cpu_cores": {"load": 0.2}}
    assert not analysis.loadgen_saturated(row, processes=1)
    assert analysis.loadgen_saturated({**row, "cpu_cores": {"load": 0.95}}, processes=1)
    assert not analysis.loadgen_saturated({**row, "cpu_cores": {"load": 0.95}}, processes=2)
    late = {**row, "loadgen": {"sent_ratio": 0.9, "lateness_ms": {"p50": 1.0}}}
    assert analysis.loadgen_saturated(late, processes=1)


def test_split_shares_rate_and_connections():
    plan = LoadPlan("http://x", (), (), seconds=1.0, rate=90.0)
    assert [p.rate for p in split(plan, 3)] == [30.0] * 3
    assert len({p.seed for p in split(plan, 3)}) == 3
    closed = LoadPlan("http://x", (), (), seconds=1.0, concurrency=5)
    assert [p.concurrency for p in split(closed, 3)] == [2, 2, 1]
    assert [p.concurrency for p in split(closed, 8)] == [1] * 5  # no idle processes


def test_mix_and_traffic(repository):
    models = load_repository(repository)
    assert traffic_mod.parse_mix(None, models) == {MODEL: 1.0}
    assert traffic_mod.parse_mix(f"{MODEL}=3", models) == {MODEL: 1.0}
    with pytest.raises(ValueError, match="no model"):
        traffic_mod.parse_mix("nope=1", models)
    media = traffic_mod.Media("web", seed=0)
    for kind in traffic_mod.INPUTS:
        t = traffic_mod.build(models, {MODEL: 1.0}, 0.25, media, kind)
        assert t.classes == (f"{MODEL}/be", f"{MODEL}/rt")
        assert sum(t.weights) == pytest.approx(1.0)
        rt = sum(w for w, r in zip(t.weights, t.requests) if r.cls == 1)
        assert rt == pytest.approx(0.25)
        req = t.requests[-1]
        body, headers = http_body(req.input_name, req.datatype, list(req.shape), req.data, req.priority)
        parsed = decode_request(body, int(headers[HEADER_LENGTH]))
        assert parsed.parameters["priority"] == 1 and req.model == MODEL
        if kind == "tensor":
            assert parsed.inputs[0].datatype == "FP32" and parsed.inputs[0].shape == [1, 3, 224, 224]
        else:
            assert parsed.inputs[0].datatype == "BYTES" and parsed.inputs[0].data[0] in media.jpegs


def test_load_processes_speak_grpc_and_shared_memory(repository):
    """Every transport of the load processes against `atoll serve`: all answered, and the
    processes' shared-memory regions unregistered when they end."""

    models = load_repository(repository)
    traffic = traffic_mod.build(models, {MODEL: 1.0}, 0.5, traffic_mod.Media("web", seed=1), "tensor")
    with ServerProcess(["--repository", str(repository), "--backend", "cpu"]) as server:
        for protocol, shm in (("grpc", False), ("grpc", True), ("grpc-stream", False), ("http", True)):
            plan = LoadPlan(server.url, traffic.requests, traffic.weights, 1.0, concurrency=2,
                            protocol=protocol, grpc=server.grpc_address, shm=shm)  # fmt: skip
            with LoadProcesses([plan]) as load:
                load.go()
                records = load.records()
            assert records.size > 0 and set(records["status"].tolist()) == {200}, (protocol, shm)
            assert set(records["cls"].tolist()) == {0, 1}
        with urllib.request.urlopen(f"{server.url}/v2/systemsharedmemory/status", timeout=30) as r:
            assert json.loads(r.read()) == []


@pytest.fixture(scope="module")
def plain_server(repository):
    with servers.plain(str(repository), ()) as system:
        yield system


def test_the_plain_baselines_workers_end_with_it_however_it_ends(repository):
    with servers.plain(str(repository), ()) as system:
        workers = descendants(system.pid)
        assert workers
        os.kill(system.pid, signal.SIGKILL)
        until(lambda: not any(map(alive, workers)), "every worker of the killed server is gone")


def _post(url: str, body: bytes, headers: dict) -> tuple[int, bytes, dict]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=60) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def test_plain_baseline_answers_as_onnxruntime_does(plain_server, repository):
    jpeg = jpeg_bytes(500, 375, seed=3)
    x = cpu_backend.image(jpeg)[None]
    session = ort.InferenceSession(str(load_repository(repository)[MODEL].path),
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    (expected,) = session.run(["logits"], {"input": x})
    url = f"{plain_server.url}/v2/models/{MODEL}/infer"
    for body, headers in (infer_body("image", [jpeg]), tensor_body("input", x)):
        status, payload, reply = _post(url, body, headers)
        assert status == 200
        head = int(reply[HEADER_LENGTH])
        assert json.loads(payload[:head])["outputs"][0]["shape"] == [1, 1000]
        got = np.frombuffer(payload[head:], dtype=np.float32).reshape(1, 1000)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    status, payload, _ = _post(url, *infer_body("image", [b"not a jpeg"]))
    assert status == 400 and "not a JPEG" in json.loads(payload)["error"]
    assert _post(f"{plain_server.url}/v2/models/nope/infer", b"{}", {})[0] == 404


def test_bench_serve_writes_rows(plain_server, repository, tmp_path):
    """The whole command against a running server (the baseline stands in for Atoll at --url)."""

    out = tmp_path / "serve.json"
    args = build_parser().parse_args([
        "bench", "serve", "--url", plain_server.url, "--repository", str(repository), "--no-ideal",
        "--input", "tensor", "--rate", "20", "--duration", "1", "--warmup", "0.5", "--rt-share", "0.5",
        "--rt-isolation", "--rt-rate", "10", "--rt-rounds", "2", "--device", "test", "--out", str(out),
        "--plot", str(tmp_path / "serve.png")])  # fmt: skip
    assert args.func is serve.run and serve.run(args) == 0
    doc = json.loads(out.read_text())
    assert doc["device"] == "test" and doc["config"]["mix"] == {MODEL: 1.0}
    points = [(r["input"], r["mode"], r["rate_rps"], r["concurrency"]) for r in doc["results"]]
    pair = [("tensor", "rt-idle", 10.0, None), ("tensor", "rt-loaded", 10.0, serve.PROBE_CONCURRENCY)]
    assert points == [("tensor", "open", 20.0, None), *pair, *pair]
    assert [r.get("round") for r in doc["results"]] == [None, 0, 0, 1, 1]
    (s,) = doc["summary"]  # real-time p99 alone and beside closed-loop best-effort load, two rounds pooled
    assert s["rt_p99_ratio"] == pytest.approx(s["rt_p99_loaded_ms"] / s["rt_p99_idle_ms"], rel=1e-2)
    rt = [r["per_class"][f"{MODEL}/rt"]["latency_ms"] for r in doc["results"][1:]]
    assert s["rt_samples"] == {"idle": rt[0]["n"] + rt[2]["n"], "loaded": rt[1]["n"] + rt[3]["n"]}
    # a pooled p99 lies between the rounds' own (percentiles of a union are bounded by the parts')
    for mode, parts in (("idle", rt[0::2]), ("loaded", rt[1::2])):
        assert min(p["p99"] for p in parts) - 0.01 <= s[f"rt_p99_{mode}_ms"] <= max(p["max"] for p in parts)
    assert [r["ratio"] for r in s["rt_rounds"]] == [round(rt[1]["p99"] / rt[0]["p99"], 3),
                                                    round(rt[3]["p99"] / rt[2]["p99"], 3)]
    idle = doc["results"][1]
    assert idle["per_class"][f"{MODEL}/be"]["requests"] == 0 < idle["per_class"][f"{MODEL}/rt"]["requests"]
    for row in doc["results"]:
        assert row["server"] == "atoll" and row["errors"] == {}
        assert set(row["latency_ms"]) >= {"p50", "p95", "p99"}
        assert row["latency_ms"]["p50"] <= row["latency_ms"]["p95"] <= row["latency_ms"]["p99"]
        assert set(row["per_class"]) == {f"{MODEL}/be", f"{MODEL}/rt"}
        assert sum(c["requests"] for c in row["per_class"].values()) == row["requests"] > 0
        assert row["ideal_rps"] is None and row["ideal_ratio"] is None
        assert row["program_builds"] is None  # the baseline has no such metric
        assert row["cpu_cores"]["server"] is None or row["cpu_cores"]["server"] == 0.0  # not ours
        assert row["loadgen"]["processes"] == (2 if row["mode"] == "rt-loaded" else 1)
        assert isinstance(row["loadgen"]["saturated"], bool)
    assert (tmp_path / "serve.png").stat().st_size > 0


@pytest.mark.parametrize("cores, reserved, procs, server, load, processes", [
    (2, None, None, (), (), 1),  # below 8 cores everything shares
    (2, 1, None, (0,), (1,), 1),
    (16, None, None, tuple(range(14)), (14, 15), 2),  # a core of every 8 for the load, a process each
    (16, 3, None, tuple(range(13)), (13, 14, 15), 3),
    (16, 0, 4, (), (), 4),
])
def test_cores_split_between_servers_and_load(monkeypatch, cores, reserved, procs, server, load, processes):
    """`bench serve` and `bench robust` alike (`servers.split_cores`)."""

    monkeypatch.setattr(servers.os, "sched_getaffinity", lambda pid: set(range(cores)))
    args = argparse.Namespace(loadgen_cores=reserved, loadgen_procs=procs)
    assert servers.split_cores(args, "serve") == (server, load, processes)
    with pytest.raises(SystemExit, match=rf"atoll bench robust: --loadgen-cores must be in 0\.\.{cores - 1}"):
        servers.split_cores(argparse.Namespace(loadgen_cores=cores, loadgen_procs=None), "robust")


def test_triton_baseline_answers_as_onnxruntime_does(repository):
    """Real tritonserver where nvidia-pytriton is installed (never required: skipped elsewhere)."""


    try:
        triton_baseline.triton_home()
    except triton_baseline.TritonUnavailable as exc:
        pytest.skip(str(exc))
    jpeg = jpeg_bytes(640, 480, seed=5)
    x = cpu_backend.image(jpeg)[None]
    session = ort.InferenceSession(str(load_repository(repository)[MODEL].path),
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    (expected,) = session.run(["logits"], {"input": x})
    with triton_baseline.server(str(repository), ()) as system:
        url = f"{system.url}/v2/models/{MODEL}/infer"
        for body, headers in (infer_body("image", [jpeg]), tensor_body("input", x)):
            status, payload, reply = _post(url, body, headers)
            assert status == 200
            got = np.frombuffer(payload[int(reply[HEADER_LENGTH]):], dtype=np.float32).reshape(1, 1000)
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
        assert _post(url, *infer_body("image", [b"junk"]))[0] == 400


def test_cpu_meter_counts_a_child_that_ends_within_the_window():
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    script = ("import subprocess, sys; sys.stdin.readline(); "
              f"subprocess.run([sys.executable, '-c', {burn!r}]); print('done', flush=True); sys.stdin.readline()")
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        meter = CpuMeter({"server": [parent.pid]})
        start = time.monotonic()
        meter.start()
        parent.stdin.write("\n")
        parent.stdin.flush()
        assert parent.stdout.readline() == "done\n"  # the child burned 0.3 CPU-s and was waited for
        cores = meter.stop()
        wall = time.monotonic() - start
    finally:
        parent.kill()
        parent.wait()
    assert cores["server"] * wall >= 0.25  # (the child's CPU, in clock ticks; without its parent's count: ~0)


def test_cpu_meter_counts_a_process_tree():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in descendants(os.getpid()) and os.getpid() in descendants(os.getpid())
        meter = CpuMeter({"mine": [os.getpid()], "gone": [2**22 + 1]})
        meter.start()
        cores = meter.stop()
    finally:
        child.kill()
        child.wait()
    assert set(cores) == {"mine", "gone", "other", "machine"} and cores["gone"] == 0.0
    assert cores["mine"] >= 0.0 and cores["other"] >= 0.0  # ticks, not timing: only signs are sure

