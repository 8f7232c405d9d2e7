"""Acceptance of issue #43 items 1 and 2: Triton's python_backend example models, written here
(models.py), served by a real `atoll serve` and called by tritonclient over HTTP, gRPC and the gRPC
stream: add_sub, a BLS model calling it, a decoupled model answering N responses, a batching model
with two instances, an ensemble of Python pre-processing + ONNX + Python top-k; and a model that raises, hangs or dies is contained (its request gets an error,
its instance starts again, the other models serve on)."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request

import numpy as np
import pytest
from fpga_host import cpu_backend
from tests.atoll.client_env import client_python
from tests.atoll.probes import PATIENCE_S
from tests.atoll.pybackend.models import write_repository

from atoll.bench.corpus import jpeg_bytes
from atoll.supervisor.server_process import ServerProcess

HERE = os.path.dirname(__file__)
ADDED, SUBTRACTED = [0.5, 1.5, 2.5, 3.5], [-0.5, 0.5, 1.5, 2.5]


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    python = client_python()
    tmp = tmp_path_factory.mktemp("python_models")
    root = write_repository(tmp / "repo")
    (tmp / "in.jpg").write_bytes(jpeg_bytes(320, 240, seed=43))
    args = ["--repository", str(root), "--backend", "cpu", "--set", "vgpus.cpu_vgpus=1", "--front-ends", "1",
            "--exit-on-error", "false"]  # model no_init does not load
    with ServerProcess(args) as server:
        proc = subprocess.run([python, os.path.join(HERE, "client_calls.py"), server.url.removeprefix("http://"),
                               server.grpc_address, str(tmp / "in.jpg"), str(tmp / "image.npy")],
                              capture_output=True, text=True, timeout=PATIENCE_S)  # fmt: skip
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=PATIENCE_S) as r:
            metrics = r.read().decode()
    log = "\n".join(server.log)  # with what the instances said while stopping
    assert proc.returncode == 0, proc.stderr[-3000:]
    image = (np.load(tmp / "image.npy"), cpu_backend.image((tmp / "in.jpg").read_bytes()))
    return json.loads(proc.stdout) | {"metrics": metrics, "image": image}, log


def test_add_sub_answers_http_grpc_and_the_stream(answers):
    got, _ = answers
    for path in ("http", "grpc", "stream"):
        assert got[path] == [ADDED, SUBTRACTED], path


def test_a_batching_model_answers_each_row(answers):
    got, _ = answers
    assert got["batched"] == [[[2.0 * i] * 4] for i in range(16)]


def test_bls_calls_another_model_of_the_server(answers):
    got, _ = answers
    assert got["bls"] == [ADDED, SUBTRACTED]
    assert "no_such_model" in got["bls_error"]


def test_a_decoupled_model_answers_several_times_on_the_stream(answers):
    got, _ = answers
    assert got["repeat"] == [[[4], [0]], [[5], [1]], [[6], [2]]]
    assert got["after_repeat"] == [ADDED, SUBTRACTED]
    assert got["repeat_aio"] == [["7", [7], [0]], ["7", [8], [1]], ["9", [9], [0]]]  # each answer names its request
    assert "decoupled" in got["repeat_http"]


def test_a_model_that_raises_hangs_or_dies_is_contained(answers):
    got, log = answers
    (raised, *after_raise), (hung, *after_hang), (died, *after_death) = got["faults"]
    assert "execute raised ValueError: asked to fail" in raised
    assert "atoll.execute_timeout_s" in hung
    assert "died (exit code 3)" in died
    for after in (after_raise, after_hang, after_death):
        assert after == [[0], [ADDED, SUBTRACTED]]
    assert got["ready"] == [True] * 6
    assert log.count("faulty: instance 0 started again") == 3  # the hang and the deaths (one while idle)
    assert 'atoll_worker_restarts_total{kind="python"} 3.0' in got["metrics"]
    assert got["idle_death"] == [0]
    assert "faulty: instance 0 died (exit code -9) while idle" in log
    assert got["add_sub_success"] >= 6


def test_an_ensemble_runs_python_onnx_python_steps(answers):
    got, _ = answers
    raw = np.stack([np.arange(16, dtype=np.uint8) * (i + 1) for i in range(2)])
    scaled = raw.astype(np.float32) / 255
    best = np.argsort(-(scaled + 1), axis=-1, kind="stable")[:, :3]
    for path in ("http", "grpc"):
        indices, scores, doubled = got[f"pipeline_{path}"]
        assert indices == best.tolist(), path
        np.testing.assert_array_equal(np.array(scores, np.float32), np.take_along_axis(scaled + 1, best, axis=-1))
        np.testing.assert_array_equal(np.array(doubled, np.float32), scaled * 2)
    assert "ensemble 'broken' step 0 (model 'faulty'): " in got["broken"]
    assert "asked to fail" in got["broken"]


def test_each_composing_model_counts_its_own_requests(answers):
    got, _ = answers
    assert got["composing"] == {"pipeline": 2, "scale": 2, "pair": 2, "topk": 2}


def test_a_model_whose_initialize_raises_does_not_load(answers):
    got, _ = answers
    entry = got["index"]["no_init"]
    assert entry["state"] == "UNAVAILABLE"
    assert "ZeroDivisionError: division by zero" in entry["reason"]
    assert got["index"]["add_sub"]["state"] == "READY"


def test_a_python_model_takes_a_jpeg_preprocessed(answers):
    got, _ = answers
    answered, made = got["image"]
    np.testing.assert_array_equal(answered, made[None])


def test_each_served_version_of_a_python_model_runs_its_own_instances(answers):
    got, _ = answers
    assert got["versions"] == [[1], [2], [2]]  # no version named: the greatest


def test_finalize_runs_at_unload(answers):
    _, log = answers
    assert "add_sub: finalize" in log
