"""A front end runs the best-effort requests of plain onnxruntime models on CPU vGPUs itself
(`front_end/colocated.py`), end to end through `atoll serve`: the outputs are onnxruntime's on
the test's own preprocessing, the batcher never sees those requests (no batch formed for them),
while real-time requests and requests of several rows still go through it, and Triton's
statistics count every execution."""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import onnxruntime
import pytest
from gpu_runtime.zoo import build
from gpu_runtime.zoo.repository import write_model
from tests.atoll.test_server_e2e import MODEL, _decode_binary_response, _post, _reference_logits
from tests.atoll.test_priority import CONFIG
from tests.gpu_runtime.chain_model import matmul_chain

from atoll.bench.bodies import infer_body, tensor_body
from atoll.bench.corpus import jpeg_bytes
from atoll.supervisor.server_process import ServerProcess


def _chain(root):
    (root / "chain" / "1").mkdir(parents=True)
    (root / "chain" / "config.pbtxt").write_text(CONFIG % "")
    matmul_chain(root / "chain" / "1" / "model.onnx", np.random.default_rng(11), layers=6)


def _infer(url: str, model: str, body_and_headers) -> np.ndarray:
    status, headers, payload = _post(f"{url}/v2/models/{model}/infer", *body_and_headers)
    assert status == 200, payload
    return _decode_binary_response(headers, payload)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


@pytest.mark.timeout(600)
def test_best_effort_rows_run_in_the_front_end_others_through_the_batcher(tmp_path):
    root = tmp_path / "repo"
    write_model(root, MODEL, build(MODEL))
    _chain(root)
    jpeg = jpeg_bytes(320, 240, seed=3)
    x = np.random.default_rng(12).standard_normal((2, 768)).astype(np.float32)
    expected = onnxruntime.InferenceSession(str(root / "chain" / "1" / "model.onnx")).run(None, {"x": x})[0]
    args = ["--repository", str(root), "--backend", "cpu", "--front-ends", "1", "--set", "vgpus.cpu_vgpus=1"]
    with ServerProcess(args) as server:
        logits = _infer(server.url, MODEL, infer_body("image", [jpeg]))  # colocated
        one = _infer(server.url, "chain", tensor_body("x", x[:1]))  # colocated
        rt = _infer(server.url, "chain", tensor_body("x", x[:1], priority=1))  # real time: the dispatcher
        two = _infer(server.url, "chain", tensor_body("x", x))  # two rows: the batcher
        metrics = _get(f"{server.url}/metrics")
        stats = {m["name"]: m for m in json.loads(_get(f"{server.url}/v2/models/stats"))["model_stats"]}
    assert server.proc.returncode == 0, "\n".join(server.log[-20:])
    log = "\n".join(server.log)
    for name in (MODEL, "chain"):
        assert f"{name}/1: the front ends run its best-effort requests themselves" in log, log
    np.testing.assert_allclose(logits[0], _reference_logits(root, jpeg), rtol=1e-4, atol=1e-4)
    for got, want in ((one, expected[:1]), (rt, expected[:1]), (two, expected)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # the batcher formed batches for the real-time request and the two-row one only
    assert f'atoll_batch_size_count{{bucket="rt",model="chain",vgpu="cpu0"}} 1.0' in metrics
    assert f'model="{MODEL}"' not in "".join(line for line in metrics.splitlines() if "atoll_batch_size" in line)
    formed = [line for line in metrics.splitlines() if line.startswith("atoll_batch_size_count") and "chain" in line]
    assert sum(float(line.split()[-1]) for line in formed) == 2.0
    # Triton's statistics count every execution, wherever it ran
    assert (stats[MODEL]["execution_count"], stats[MODEL]["inference_count"]) == (1, 1)
    assert (stats["chain"]["execution_count"], stats["chain"]["inference_count"]) == (3, 4)
