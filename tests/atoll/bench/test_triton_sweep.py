"""The bench's Triton settings sweep: the choice among candidates, the configs it writes (config.pbtxt
and the load API's JSON override), the bound it takes from Atoll's rows, and, where nvidia-pytriton
is installed, a real tritonserver reloaded with other settings and still answering."""

from __future__ import annotations

import argparse
import json
import urllib.request

import numpy as np
import pytest

from atoll.bench import serve, triton_baseline, triton_sweep
from atoll.bench.bodies import infer_body
from atoll.bench.corpus import jpeg_bytes
from atoll.bench.triton_baseline import TritonSettings, model_config
from atoll.cli import build_parser
from atoll.kserve.protocol import HEADER_LENGTH
from atoll.repository.specs import load_repository
from tests.atoll.probes import zoo_repository

MODEL = "mobilenet_v3_small"


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return zoo_repository(tmp_path_factory.mktemp("repo"), MODEL)


@pytest.fixture(scope="module")
def spec(repository):
    return load_repository(repository)[MODEL]


def _trial(rps: float, p99: float | None, per_core: float | None = None, errors: int = 0) -> dict:
    return {"throughput_rps": rps, "p99_ms": p99, "per_server_core": per_core, "errors": errors}


def test_choice_is_the_most_per_core_within_the_bound():
    trials = [_trial(300, 90, 150), _trial(320, 140, 170), _trial(280, 60, 160), _trial(250, 50, 140)]
    assert triton_sweep.choose(trials, 100.0) == 2  # 170 per core, but p99 over the bound
    assert triton_sweep.choose(trials, 200.0) == 1


def test_choice_without_a_bound_is_the_highest_throughput():
    assert triton_sweep.choose([_trial(300, 90, 150), _trial(320, 400, 120), _trial(310, 60, 160)], None) == 1


def test_choice_when_none_meets_the_bound_is_the_lowest_p99():
    assert triton_sweep.choose([_trial(300, 190, 150), _trial(320, 140, 170), _trial(280, 160, 200)], 100.0) == 1


def test_choice_passes_over_failing_and_silent_candidates():
    trials = [_trial(400, 50, 300, errors=3), _trial(0, None), _trial(200, 80, 100)]
    assert triton_sweep.choose(trials, 100.0) == 2 and triton_sweep.choose(trials, None) == 2
    assert triton_sweep.choose([_trial(10, None), _trial(20, 30, 10, errors=1)], 100.0) == 1  # all fail: most answers


def test_choice_without_cpu_figures_goes_by_throughput():
    assert triton_sweep.choose([_trial(300, 90), _trial(320, 95), _trial(330, 120)], 100.0) == 1


def test_candidates_start_with_the_single_config_and_differ():
    grid = triton_sweep.candidates(2)
    assert grid[0] == TritonSettings(2, threads=1, queue_delay_us=triton_baseline.QUEUE_DELAY_US)
    assert len(set(grid)) == len(grid) == 6
    assert {s.instances for s in grid} == {1, 2, 4}
    assert all(s.instances * s.threads <= 4 for s in grid)


def test_config_pbtxt_carries_the_settings(spec):
    text = model_config(spec, TritonSettings(3, threads=2, queue_delay_us=5000, preferred_batch_sizes=(4, 8, 64),
                                             max_batch_size=16))  # fmt: skip
    assert 'backend: "python"' in text and "max_batch_size: 16" in text
    assert '{ name: "image" data_type: TYPE_STRING dims: [ 1 ] optional: true }' in text
    assert '{ name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] optional: true }' in text
    assert "dynamic_batching { max_queue_delay_microseconds: 5000 preferred_batch_size: [ 4, 8 ] }" in text
    assert "instance_group [ { count: 3 kind: KIND_CPU } ]" in text
    assert 'key: "atoll_threads" value { string_value: "2" }' in text


def test_config_pbtxt_of_the_default_settings(spec):
    text = model_config(spec, TritonSettings(2))
    assert "max_batch_size: 32" in text and "preferred_batch_size" not in text
    assert "dynamic_batching { max_queue_delay_microseconds: 1000 }" in text


def test_override_replaces_the_settings_and_keeps_the_rest(spec):
    config = {"name": MODEL, "backend": "python", "max_batch_size": 32, "input": [{"name": "image"}],
              "dynamic_batching": {"preferred_batch_size": [32], "max_queue_delay_microseconds": 1000,
                                   "preserve_ordering": False},
              "instance_group": [{"name": f"{MODEL}_0", "kind": "KIND_CPU", "count": 2, "gpus": []}],
              "parameters": {"atoll_onnx": {"string_value": "/m.onnx"}, "atoll_threads": {"string_value": "1"}}}  # fmt: skip
    out = triton_sweep.override(config, spec, TritonSettings(1, threads=2, queue_delay_us=0,
                                                             preferred_batch_sizes=(4, 8), max_batch_size=6))  # fmt: skip
    assert out["max_batch_size"] == 6 and out["input"] == [{"name": "image"}]
    assert out["dynamic_batching"] == {"preferred_batch_size": [4], "max_queue_delay_microseconds": 0,
                                       "preserve_ordering": False}  # fmt: skip
    assert out["instance_group"] == [{"count": 1, "kind": "KIND_CPU"}]
    assert out["parameters"] == {"atoll_onnx": {"string_value": "/m.onnx"}, "atoll_threads": {"string_value": "2"}}
    assert triton_sweep.override(config, spec, TritonSettings(2, max_batch_size=64))["max_batch_size"] == 32
    assert config["max_batch_size"] == 32  # the answer it came from is left as it was


def test_served_are_the_models_the_traffic_sends_to():
    models = {"a": "spec a", "b": "spec b", "c": "spec c"}
    assert triton_sweep.served(models, ("b/be", "b/rt", "a/be")) == {"b": "spec b", "a": "spec a"}


def test_tune_tries_each_candidate_and_serves_the_best(monkeypatch):
    served = []
    monkeypatch.setattr(triton_sweep, "apply", lambda system, specs, settings: served.append(settings))
    figures = iter([(300, 90, 1.9), (320, 80, 1.6), (330, 150, 1.9), (310, 70, 1.95), (305, 85, 2.0), (200, 60, 1.0)])

    def trial() -> dict:
        rps, p99, cores = next(figures)
        return {"throughput_rps": rps, "latency_ms": {"p99": p99}, "cpu_cores": {"server": cores},
                "throughput_per_server_core": round(rps / cores, 1), "errors": {}}  # fmt: skip

    system = argparse.Namespace(about={"cores": 2})
    record = triton_sweep.tune(system, {}, (100.0, "atoll"), trial, "media http 8 conn")
    grid = triton_sweep.candidates(2)
    assert served == [*grid, grid[1]]  # every candidate, then the winner (320 req/s on 1.6 cores) again
    assert record["chosen"] == grid[1].about() and record["p99_bound_ms"] == 100.0
    assert record["p99_bound_from"] == "atoll" and len(record["candidates"]) == 6
    assert record["candidates"][5] == {"settings": grid[5].about(), "throughput_rps": 200, "p99_ms": 60,
                                       "server_cores": 1.0, "per_server_core": 200.0, "errors": 0}  # fmt: skip


def _bench() -> serve.Bench:
    return serve.Bench(argparse.Namespace(slo_ms=100.0), (), 1, None, {})


LABELS = {"input": "media", "protocol": "http", "shm": False}


def _row(server: str, p99: float, concurrency: int | None = None, rate: float | None = None, **labels) -> dict:
    return {"server": server, **LABELS, **labels, "concurrency": concurrency, "rate_rps": rate,
            "latency_ms": {"p99": p99}}  # fmt: skip


def test_bound_is_atolls_p99_at_the_same_point():
    bench = _bench()
    bench.points += [_row("atoll", 40.0, 8), _row("atoll", 90.0, 64), _row("plain", 30.0, 8),
                     _row("atoll", 20.0, 8, input="tensor"), _row("atoll", 55.0, rate=120.0)]  # fmt: skip
    assert bench._triton_bound(LABELS, {"concurrency": 8}) == (40.0, "atoll")
    assert bench._triton_bound(LABELS, {"concurrency": 64, "seconds": 5.0}) == (90.0, "atoll")
    assert bench._triton_bound(LABELS, {"rate": 120.0}) == (55.0, "atoll")


def test_bound_without_atolls_point_is_the_slo_in_open_loop_only():
    bench = _bench()
    bench.points.append(_row("atoll", 40.0, 8))
    assert bench._triton_bound(LABELS, {"rate": 150.0}) == (100.0, "slo")
    assert bench._triton_bound(LABELS, {"concurrency": 16}) == (None, "none")


def test_the_sweep_is_on_unless_told():
    parse = build_parser().parse_args
    assert parse(["bench", "serve", "--baseline", "triton"]).triton_sweep is True
    assert parse(["bench", "serve", "--baseline", "triton", "--no-triton-sweep"]).triton_sweep is False


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as reply:
        return json.loads(reply.read())


def test_a_real_triton_reloads_with_other_settings_and_answers(repository, spec):
    """Real tritonserver where nvidia-pytriton is installed (never required: skipped elsewhere)."""
    try:
        triton_baseline.triton_home()
    except triton_baseline.TritonUnavailable as exc:
        pytest.skip(str(exc))
    settings = TritonSettings(1, threads=2, queue_delay_us=5000, preferred_batch_sizes=(4, 8), max_batch_size=8)
    with triton_baseline.server(str(repository), (), triton_sweep.SERVER_OPTIONS) as system:
        before = _get(f"{system.url}/v2/models/{MODEL}/config")
        assert before["dynamic_batching"]["max_queue_delay_microseconds"] == triton_baseline.QUEUE_DELAY_US
        before_stubs = triton_sweep._stubs(system, [MODEL])
        assert len(before_stubs) == system.about["cores"]
        triton_sweep.apply(system, {MODEL: spec}, settings)
        after = _get(f"{system.url}/v2/models/{MODEL}/config")
        assert system.about["settings"] == settings.about()
        stubs = triton_sweep._stubs(system, [MODEL])  # the old instances are gone, the new one is up
        assert len(stubs) == 1 and not stubs & before_stubs
        assert after["max_batch_size"] == 8 and after["instance_group"][0]["count"] == 1
        assert after["dynamic_batching"]["max_queue_delay_microseconds"] == 5000
        assert after["dynamic_batching"]["preferred_batch_size"] == [4, 8]
        assert after["parameters"]["atoll_threads"] == {"string_value": "2"}
        body, headers = infer_body("image", [jpeg_bytes(320, 240, seed=3)])
        request = urllib.request.Request(f"{system.url}/v2/models/{MODEL}/infer", body, headers, method="POST")
        with urllib.request.urlopen(request, timeout=60) as reply:
            payload, length = reply.read(), int(reply.headers[HEADER_LENGTH])
        logits = np.frombuffer(payload[length:], dtype=np.float32)
        assert logits.shape == (1000,) and np.isfinite(logits).all()
