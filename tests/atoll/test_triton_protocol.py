"""The whole Triton protocol through the real `tritonclient` (HTTP and gRPC, sync and asyncio)
against a real `atoll serve` with two front ends in explicit model-control mode: every endpoint's
status, and the values behind them (the same logits over every path, classification against
argsort, statistics against the client's own count, shared memory, model load and unload)."""

from __future__ import annotations

import urllib.request

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.atoll.test_server_e2e import _reference_logits
from tests.atoll.triton_conformance import ATOLL_ARGS, calls_repository, run_calls, write_media

from atoll.supervisor.server_process import ServerProcess

# every call not listed here answers OK
ERRORS = {
    "unknown model metadata": ("404", "NOT_FOUND"), "unknown model version": ("404", "NOT_FOUND"),
    "infer jpeg and tensor": ("400", "INVALID_ARGUMENT"), "infer unknown model": ("404", "NOT_FOUND"),
    "infer unknown output": ("400", "INVALID_ARGUMENT"), "infer bad shape": ("400", "INVALID_ARGUMENT"),
    "statistics of unloaded model": ("400", "INVALID_ARGUMENT"),
    "cuda shared memory register": ("400", "INVALID_ARGUMENT"),
    "trace settings": ("501", "UNIMPLEMENTED"),  # CUDA shared memory status: empty, with no GPU vGPUs
    "log settings": ("501", "UNIMPLEMENTED"), "shm register twice": ("400", "ALREADY_EXISTS"),
    "shm register missing key": ("500", "INTERNAL"), "shm status unknown": ("404", "NOT_FOUND"),
    "shm output too small": ("500", "INTERNAL"), "shm unknown region": ("404", "NOT_FOUND"),
}  # fmt: skip
OTHER_ERRORS = {"http infer unloaded model": "404", "http load unknown model": "500",
                "http.aio infer unknown model": "404", "grpc.aio infer unknown model": "StatusCode.NOT_FOUND",
                "raw unknown endpoint": "404", "raw infer bad json": "400"}  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("protocol")
    root = calls_repository(tmp / "repo")
    media = write_media(tmp)
    with ServerProcess(["--repository", str(root), *ATOLL_ARGS, "--front-ends", "2"]) as server:
        calls = run_calls(server.url, server.grpc_address, media)
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=30) as r:
            metrics = r.read().decode()
    assert server.proc.returncode == 0, "\n".join(server.log[-20:])
    return calls, metrics, root, (media / "image.jpg").read_bytes()


def test_every_call_answers_with_tritons_status(served):
    calls = served[0]
    expected = {}
    for name in calls:
        protocol, _, call = name.partition(" ")
        if call in ERRORS and protocol in ("http", "grpc"):
            http, grpc = ERRORS[call]
            expected[name] = http if protocol == "http" else f"StatusCode.{grpc}"
        else:
            expected[name] = OTHER_ERRORS.get(name, "OK")
    assert {name: record["status"] for name, record in calls.items()} == expected
    assert calls["raw unknown endpoint"]["body"] == {"error": "Not Found"}
    assert "JSON" in calls["raw infer bad json"]["body"]["error"]
    assert "alternatives" in calls["http infer jpeg and tensor"]["error"]


def test_the_same_jpeg_gives_the_same_logits_over_every_path(served):
    calls, _, root, jpeg = served
    paths = ("http infer jpeg", "grpc infer jpeg", "http.aio infer jpeg", "grpc.aio infer jpeg")
    first = calls[paths[0]]["value"]
    assert all(calls[p]["value"] == first for p in paths)  # identical, not close
    np.testing.assert_allclose(first, _reference_logits(root, jpeg), rtol=1e-4, atol=1e-4)


def test_ready_tensors_over_grpc_http_stream_and_shared_memory_agree(served):
    calls = served[0]
    tensor = calls["http infer tensor"]["value"]
    assert calls["grpc infer tensor"]["value"] == tensor
    for protocol in ("http", "grpc"):
        assert calls[f"{protocol} shm infer"]["value"] == tensor  # read back from the output region
        for i in range(4):  # the region is mapped in whichever front end takes the connection
            assert calls[f"{protocol} shm region read over new http connection {i}"]["value"] == tensor
    stream = calls["grpc stream"]["value"]
    assert stream["0"] == stream["2"] == tensor and "nope" in stream["error"]


def test_json_and_typed_contents_give_what_binary_tensors_give(served):
    """tritonclient's binary_data=False in and out (HTTP), and gRPC typed contents (fp32 and
    bytes), for the datatypes the zoo's models take: the very same logits."""
    calls = served[0]
    assert calls["http infer tensor json"]["value"] == calls["http infer tensor"]["value"]
    assert calls["grpc infer tensor typed"]["value"] == calls["http infer tensor"]["value"]
    assert calls["http infer jpeg json output"]["value"] == calls["http infer jpeg"]["value"]
    assert calls["grpc infer jpeg typed"]["value"] == calls["http infer jpeg"]["value"]


def test_classified_top3_matches_argsort_of_the_logits(served):
    calls = served[0]
    logits = np.array(calls["http infer jpeg"]["value"], np.float32)
    top = np.argsort(-logits, kind="stable")[:3]
    want = [f"{logits[i]:f}:{i}:class{i}" for i in top]
    assert calls["http classification"]["value"] == calls["grpc classification"]["value"] == want


def test_statistics_count_every_answer(served):
    calls = served[0]
    growth = calls["statistics growth"]["value"]
    assert growth["successes"] == growth["answered"] > 10
    stats = calls["http statistics"]["structure"]["model_stats"][0]
    assert set(stats["inference_stats"]) == {"success", "fail", "queue", "compute_input", "compute_infer",
                                             "compute_output", "cache_hit", "cache_miss"}  # fmt: skip
    assert stats["batch_stats"] and calls["grpc statistics of every model"]["value"] == ["mobilenet_v3_small"]


def test_models_load_and_unload_while_serving(served):
    calls = served[0]
    index = {m["name"]: m for m in calls["http index after load"]["value"]}
    assert index["citrinet"] == {"name": "citrinet", "version": "1", "state": "READY"}
    assert calls["http infer loaded model"]["value"][2] == 256
    index = {m["name"]: m for m in calls["grpc index after unload"]["value"]["models"]}
    assert index["citrinet"] == {"name": "citrinet", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
    assert calls["http shm status after"]["value"] == [] and calls["grpc shm status after"]["value"] == {}


def test_metrics_carry_tritons_names_and_types(served):
    families = {f.name: f for f in text_string_to_metric_families(served[1])}
    for name in ("nv_inference_request_success", "nv_inference_count", "nv_inference_compute_input_duration_us",
                 "nv_inference_compute_infer_duration_us", "nv_inference_compute_output_duration_us"):
        assert families[name].type == "counter"
    assert families["nv_inference_pending_request_count"].type == "gauge"
    lines = served[1].splitlines()
    assert "# TYPE nv_inference_request_success counter" in lines
    assert not [line for line in lines if line.startswith("nv_") and "_total" in line.split("{")[0]]
    input_us = [s.value for s in families["nv_inference_compute_input_duration_us"].samples
                if s.labels["model"] == "mobilenet_v3_small"]  # fmt: skip
    assert input_us and input_us[0] > 0
