"""Issue #42 item 6: `instance_group` through a real `atoll serve` on CPU vGPUs, driven by
tritonclient over HTTP and gRPC (`instance_group_calls.py`). What it is held to is Triton's
documentation, docs/user_guide/model_configuration.md, "Instance Groups": `count` execution
instances "so that multiple inference requests for that model can be handled simultaneously";
KIND_CPU places them on the CPU, and "If no `count` is specified for a KIND_CPU instance group, then
the default instance count will be 2" (ONNX Runtime); KIND_GPU on each GPU, or those `gpus` lists
(a server without them cannot load it); KIND_AUTO (model_config.proto) a GPU where there is one,
else the CPU. That a count's instances run batches at once, each on its own executor, is held in
tests/gpu_runtime/test_engine_instances.py with executors that block on an event."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from tests.atoll.client_env import client_python
from tests.atoll.probes import PATIENCE_S
from tests.atoll.test_model_config import TENSORS, plus
from tests.atoll.user_models import write

from atoll.supervisor.server_process import ServerProcess

HERE = os.path.dirname(__file__)
ROWS = [[float(i)] * 4 for i in range(8)]  # the calls' rows; y = x + 0
MODELS = {
    "pair": "instance_group [ { count: 2 kind: KIND_CPU } ]",
    "cpu_default": "instance_group [ { kind: KIND_CPU } ]",
    "auto": "instance_group [ { count: 1 } ]",  # KIND_AUTO: the CPU on this server
    "on_gpu": "instance_group [ { count: 1 kind: KIND_GPU } ]",
    "gpu_one": "instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]",
    "by_model": "instance_group [ { kind: KIND_MODEL } ]",
    "rated": "instance_group [ { count: 1 kind: KIND_CPU rate_limiter { priority: 2 } } ]",
    "none": "instance_group [ { count: 0 kind: KIND_CPU } ]",
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    python = client_python()
    tmp = tmp_path_factory.mktemp("instance_groups")
    for name, group in MODELS.items():
        write(tmp / "repo", name, plus(0), TENSORS + group + "\n")
    args = ["--repository", str(tmp / "repo"), "--backend", "cpu", "--set", "vgpus.cpu_vgpus=1", "--front-ends", "1",
            "--exit-on-error=false"]  # fmt: skip
    with ServerProcess(args) as server:
        subprocess.run([python, os.path.join(HERE, "instance_group_calls.py"), server.url.removeprefix("http://"),
                        server.grpc_address, str(tmp / "out.json")], check=True, timeout=PATIENCE_S)  # fmt: skip
        log = list(server.log)
    return json.loads((tmp / "out.json").read_text()), log


def test_a_count_of_two_loads_two_instances_and_answers_concurrent_requests(served):
    answers, log = served
    assert any("loading pair/1 on vGPU instances {'cpu0': 2}" in line for line in log), log[-20:]
    assert any("pair/1: executor instances {'cpu0': 2}" in line for line in log)  # the worker built two
    for t in ("http", "grpc"):
        assert answers[f"{t}/pair"] == [[row] for row in ROWS]
        assert answers[f"{t}/pair/config"] == [{"name": "pair_0", "kind": "KIND_CPU", "count": 2, "gpus": []}] \
            if t == "http" else [{"name": "pair_0", "kind": "KIND_CPU", "count": 2}]  # gRPC's JSON drops empty lists
    assert answers["pair/stats"] == {"success": 16, "inferences": 16}


def test_kind_cpu_without_a_count_has_two_and_kind_auto_takes_the_cpu(served):
    answers, log = served
    assert answers["http/cpu_default/config"][0]["count"] == 2
    assert any("cpu_default/1: executor instances {'cpu0': 2}" in line for line in log)
    assert answers["http/auto/config"][0]["kind"] == "KIND_AUTO"
    assert any("auto/1: executor instances {'cpu0': 1}" in line for line in log)
    assert answers["http/auto"] == [[row] for row in ROWS]


@pytest.mark.parametrize("model, reason", [
    ("on_gpu", "on_gpu: instance_group 0 (KIND_GPU) needs a GPU; this server has CPU vGPUs only"),
    ("gpu_one", "gpu_one: instance_group 0 (KIND_GPU) needs a GPU; this server has CPU vGPUs only"),
    ("by_model", "by_model: instance_group 0: KIND_MODEL is not supported"),
    ("rated", "rated: instance_group 0: 'rate_limiter' is not supported by Atoll"),
    ("none", "none: instance_group 0: count must be a positive integer, got 0"),
])  # fmt: skip
def test_what_this_server_cannot_place_is_refused_at_load(served, model, reason):
    answers, _ = served
    (state, why), = [(s, r) for name, s, r in answers["index"] if name == model]
    assert state == "UNAVAILABLE" and reason in why, why
    assert "Error" not in why  # no exception type in the answer

