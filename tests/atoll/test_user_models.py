"""Acceptance of issue #30: a repository of user models as a Triton user brings them (built with
onnx.helper, nothing downloaded) served by a real `atoll serve`, every model answering tritonclient
over HTTP (JSON and binary data), gRPC and system shared memory with onnxruntime's outputs on the
same inputs; concurrent requests to a batching model form batches."""

from __future__ import annotations

import os
import subprocess
import urllib.request

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.atoll.client_env import client_python
from tests.atoll.probes import PATIENCE_S
from tests.atoll.user_models import (SIMPLE_CONFIG, SIMPLE_WARMUP, bert, half, masked, reference, simple,
                                     unbatched, words, write)  # fmt: skip

from atoll.supervisor.server_process import ServerProcess

HERE = os.path.dirname(__file__)
RNG = np.random.default_rng(30)
PAD = 'parameters { key: "atoll.pad_dynamic" value { string_value: "true" } }'  # padding a seq changes nothing
BATCHED = "\ndynamic_batching { }"  # requests wait up to the server's [batching] delay for others (issue #42)
MODELS = {  # name: (graph, config.pbtxt or None, inputs of one request)
    "simple": (simple(), SIMPLE_CONFIG + SIMPLE_WARMUP + BATCHED, {  # with model_warmup
        "INPUT0": RNG.integers(-99, 99, (2, 16), dtype=np.int32),
        "INPUT1": RNG.integers(-99, 99, (2, 16), dtype=np.int32)}),
    "bert": (bert(), None, {"input_ids": RNG.integers(0, 30000, (1, 7)), "attention_mask": np.ones((1, 7), np.int64),
                            "token_type_ids": RNG.integers(0, 2, (1, 7))}),
    "half": (half(), None, {"x": RNG.normal(size=(3, 8)).astype(np.float16)}),
    "masked": (masked(), None, {"mask": RNG.integers(0, 2, (2, 6)).astype(bool),
                                "pixels": RNG.integers(0, 256, (2, 6), dtype=np.uint8)}),
    "unbatched": (unbatched(), "max_batch_size: 0", {"x": RNG.normal(size=(4, 16)).astype(np.float32)}),
    "bert_padded": (bert(), PAD + BATCHED, {"input_ids": RNG.integers(0, 30000, (1, 7)),
                                  "attention_mask": np.ones((1, 7), np.int64),
                                  "token_type_ids": RNG.integers(0, 2, (1, 7))}),
    "words": (words(), None, {"text": np.array([[b"cat", b"x", "\u00e9mu".encode()], [b"dog", b"", b"cat"]])}),
}  # fmt: skip
PATHS = ("http-json", "http-binary", "grpc", "shm")
BATCHING, PADDED = ("simple", "bert_padded"), ("bert_padded",)


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    python = client_python()
    tmp = tmp_path_factory.mktemp("user_models")
    root = tmp / "repo"
    for name, (graph, config, _) in MODELS.items():
        write(root, name, graph, config)
    feeds = {f"{m}/{n}": a for m, (_, _, arrays) in MODELS.items() for n, a in arrays.items()}
    np.savez(tmp / "in.npz", **feeds)
    args = ["--repository", str(root), "--backend", "cpu", "--set", "vgpus.cpu_vgpus=1", "--front-ends", "1",
            "--set", "batching.max_queue_delay_microseconds=20000",
            "--set", "server.colocate=off"]  # batches formed: the dispatcher's path (front_end/colocated.py)  # fmt: skip
    env = {**os.environ, "BATCH": ",".join(BATCHING), "PADDED": ",".join(PADDED)}
    with ServerProcess(args) as server:
        subprocess.run([python, os.path.join(HERE, "user_model_calls.py"), server.url.removeprefix("http://"),
                        server.grpc_address, str(tmp / "in.npz"), str(tmp / "out.npz")],
                       check=True, timeout=PATIENCE_S, env=env)  # fmt: skip
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=PATIENCE_S) as r:
            metrics = r.read().decode()
    assert server.proc.returncode == 0
    return dict(np.load(tmp / "out.npz")), metrics


@pytest.mark.parametrize("model", MODELS)
def test_every_path_answers_onnxruntimes_outputs(answers, model):
    got, _ = answers
    graph, _, feeds = MODELS[model]
    expected = reference(graph, feeds)
    for path in PATHS:
        for name, want in expected.items():
            array = got[f"{model}/{path}/{name}"]
            assert array.dtype == want.dtype and array.shape == want.shape, (path, name)
            np.testing.assert_array_equal(array, want, err_msg=f"{model} {path} {name}")


def test_concurrent_requests_form_batches(answers):
    got, metrics = answers
    graph, _, feeds = MODELS["simple"]
    expected = reference(graph, {name: array[:1] for name, array in feeds.items()})
    for i in range(32):
        for name, want in expected.items():
            np.testing.assert_array_equal(got[f"simple/concurrent{i}/{name}"], want)
    assert _batches(metrics, "simple", 4 * 2 + 32) < 4 + 32  # four two-row requests (one per path), 32 one-row


def test_a_model_that_allows_padding_batches_requests_of_other_lengths(answers):
    got, metrics = answers
    graph, _, feeds = MODELS["bert_padded"]
    for i in range(32):
        length = 1 + i % 7
        expected = reference(graph, {name: array[:1, :length] for name, array in feeds.items()})
        for name, want in expected.items():  # each request's own length back, equal to onnxruntime's
            np.testing.assert_array_equal(got[f"bert_padded/concurrent{i}/{name}"], want)
    assert _batches(metrics, "bert_padded", 4 + 32) < 4 + 32  # some batch held requests of several lengths


def _batches(metrics: str, model: str, rows: int) -> float:
    """How many batches of `model` ran, after checking its `rows` were each counted in one."""
    sizes = [s for family in text_string_to_metric_families(metrics) if family.name == "atoll_batch_size"
             for s in family.samples if s.labels.get("model") == model]  # fmt: skip
    assert sum(s.value for s in sizes if s.name.endswith("_sum")) == rows
    return sum(s.value for s in sizes if s.name.endswith("_count"))
