"""Issue #42, items 4-6: a real `atoll serve` honours a Triton repository's version_policy, its
batching settings, reshape and queue policies, driven by tritonclient over HTTP and gRPC
(`model_config_calls.py`). What each assertion holds it to is Triton's documentation:
- docs/user_guide/model_configuration.md, "Version Policy": "Latest: Only the latest 'n' versions
  ... are available for inferencing"; "Specific: Only the specifically listed versions"; and the
  addition or removal of versions "can change which model version is used on subsequent inference
  requests". The KServe protocol (docs/protocol, model_version): without a version "the server will
  choose a version based on the model and internal policy" (Triton: the greatest).
- docs/user_guide/batcher.md, "Dynamic Batcher": `dynamic_batching { }` "will not delay when forming
  batches"; "Delayed Batching": `max_queue_delay_microseconds` is how long a request may wait.
- model_configuration.md, "Reshape": "the input or output shape accepted by the inference API differs
  from the input or output shape expected or produced by the underlying framework model".
- batcher.md, "Queue Policy", and model_config.proto's ModelQueuePolicy: `max_queue_size` refuses a
  request when the queue is full; a request that waited past its timeout is rejected (REJECT) or
  deferred (DELAY); `allow_timeout_override` lets a request set a shorter timeout of its own.
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper
from tests.atoll.client_env import client_python
from tests.atoll.probes import PATIENCE_S
from tests.atoll.user_models import write

from atoll.supervisor.server_process import ServerProcess

HERE = os.path.dirname(__file__)
X = np.arange(8, dtype=np.float32).reshape(2, 4)
TENSORS = """max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
QUEUED = "dynamic_batching { max_queue_delay_microseconds: %d %s }"
# one-row requests that never fill a batch: they wait out the delay (preferred 8: Batch_max 8)
WAITING = "dynamic_batching { max_queue_delay_microseconds: %d preferred_batch_size: [ 8 ] %s }"


def plus(constant: float, shape=("batch", 4)) -> bytes:
    """y = x + constant."""
    c = helper.make_tensor("c", TensorProto.FLOAT, [], [constant])
    graph = helper.make_graph([helper.make_node("Add", ["x", "c"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], [c])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _repository(root):
    for name, policy in (("versioned", "latest: { num_versions: 2 }"), ("pinned", "specific: { versions: [ 1, 3 ] }")):
        folder = write(root, name, plus(1), TENSORS + f"version_policy: {{ {policy} }}\n")
        for version in (2, 3):
            (folder / str(version)).mkdir()
            (folder / str(version) / "model.onnx").write_bytes(plus(version))
    write(root, "direct", plus(0), TENSORS)  # no dynamic_batching
    write(root, "zero", plus(0), TENSORS + QUEUED % (0, ""))
    write(root, "square", plus(0.5, ("batch", 2, 2)), """max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
""")  # fmt: skip
    write(root, "bounded", plus(0), TENSORS + WAITING % (5_000_000, "default_queue_policy { max_queue_size: 2 }"))
    write(root, "timed", plus(0), TENSORS + WAITING % (2_000_000,
                                                       "default_queue_policy { allow_timeout_override: true }"))
    write(root, "delayed", plus(0), TENSORS + WAITING % (2_000_000, "default_queue_policy { timeout_action: DELAY "
                                                         "default_timeout_microseconds: 100000 }"))  # fmt: skip


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    python = client_python()
    tmp = tmp_path_factory.mktemp("model_config")
    root = tmp / "repo"
    _repository(root)
    args = ["--repository", str(root), "--backend", "cpu", "--set", "vgpus.cpu_vgpus=1", "--front-ends", "1",
            "--model-control-mode", "explicit", "--load-model", "*",
            "--set", "batching.max_queue_delay_microseconds=600000000"]  # fmt: skip
    with ServerProcess(args) as server:
        subprocess.run([python, os.path.join(HERE, "model_config_calls.py"), server.url.removeprefix("http://"),
                        server.grpc_address, str(root), str(tmp / "out.json")],
                       check=True, timeout=PATIENCE_S)  # fmt: skip
    return json.loads((tmp / "out.json").read_text())


TRANSPORTS = ("http", "grpc")


@pytest.mark.parametrize("t", TRANSPORTS)
def test_version_policy_serves_the_versions_it_names(answers, t):
    index = {(name, version): state for name, version, state in answers[f"{t}/index"]}
    assert {v for (name, v), s in index.items() if name == "versioned" and s == "READY"} == {"2", "3"}
    assert {v for (name, v), s in index.items() if name == "pinned" and s == "READY"} == {"1", "3"}
    for model, served in (("versioned", ("2", "3")), ("pinned", ("1", "3"))):
        for version in ("1", "2", "3"):
            answer = answers[f"{t}/{model}/{version}"]
            if version in served:
                assert answer == (X + int(version)).tolist() and answers[f"{t}/{model}/{version}/ready"]
            else:
                assert "error" in answer and not answers[f"{t}/{model}/{version}/ready"], answer
        assert answers[f"{t}/{model}/none"] == (X + 3).tolist()  # no version: the greatest served


@pytest.mark.parametrize("t", TRANSPORTS)
def test_every_per_model_call_is_addressable_by_version(answers, t):
    assert answers[f"{t}/versioned/metadata"] == ["2", "3"]
    assert answers[f"{t}/versioned/2/metadata"] == "versioned"
    assert answers[f"{t}/versioned/config"] == {"latest": {"num_versions": 2}}
    stats = dict(answers[f"{t}/versioned/stats"])
    assert set(stats) == {"2", "3"} and stats["2"] >= 1 and stats["3"] >= 2
    assert answers[f"{t}/versioned/2/stats"] == ["2"]


def test_a_version_the_policy_drops_is_unloaded_and_the_other_serves(answers):
    assert answers["after/index"] == [["versioned", "2", "UNAVAILABLE", "unloaded"], ["versioned", "3", "READY", None]]
    for t in TRANSPORTS:
        assert answers[f"after/{t}/3"] == (X + 3).tolist()
        assert "error" in answers[f"after/{t}/2"] and not answers[f"after/{t}/2/ready"]


@pytest.mark.parametrize("t", TRANSPORTS)
def test_without_dynamic_batching_or_with_no_delay_a_request_runs_as_it_comes(answers, t):
    """The server's own delay is 10 minutes; these answer within the client's 30 s."""
    assert answers[f"{t}/direct"] == X.tolist() and answers[f"{t}/zero"] == X.tolist()
    assert answers[f"{t}/direct/config"] is False


@pytest.mark.parametrize("t", TRANSPORTS)
def test_reshape_serves_the_graphs_shape_as_the_configs(answers, t):
    """The graph takes and makes [batch, 2, 2]; requests and answers are [batch, 4]."""
    assert answers[f"{t}/square"] == (X + 0.5).tolist()
    assert answers[f"{t}/square/config"] == [{"shape": ["2", "2"] if t == "grpc" else [2, 2]}]


def test_a_full_queue_refuses_at_once(answers):
    """Six requests at once, two may queue: four are refused with Triton's message."""
    refused = [a for a in answers["bounded"] if isinstance(a, dict)]
    served = [a for a in answers["bounded"] if not isinstance(a, dict)]
    assert len(served) == 2 and all(a == X[:1].tolist() for a in served)
    assert len(refused) == 4 and all("Exceeds maximum queue size" in a["error"] for a in refused)


def test_a_request_past_its_timeout_is_rejected_or_delayed(answers):
    http_short, http_none, grpc_short, grpc_none = answers["timed"]
    for short in (http_short, grpc_short):
        assert "Request timeout expired" in short["error"]  # its own 100 ms, shorter than none: allowed
    assert http_none == X[:1].tolist() and grpc_none == X[:1].tolist()
    assert answers["delayed"] == [X[:1].tolist(), X[:1].tolist()]  # DELAY: late, still answered
