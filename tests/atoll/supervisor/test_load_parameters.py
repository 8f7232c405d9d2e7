"""Triton's load request parameters over HTTP against a real `atoll serve` (explicit mode): a `config`
override changes the served config, a malformed one and an unknown model are refused with Triton's
`failed to load`, and a model sent as files in the request is served."""

from __future__ import annotations

import base64
import json
import urllib.request

import numpy as np
from tests.atoll.probes import PATIENCE_S
from tests.atoll.supervisor.test_failing_models import SERVER, _post
from tests.atoll.user_models import FP32_PAIR_CONFIG, fp32_pair, write

from atoll.supervisor.server_process import ServerProcess


def _config(url: str, model: str) -> dict:
    with urllib.request.urlopen(f"{url}/v2/models/{model}/config", timeout=PATIENCE_S) as r:
        return json.loads(r.read())


def test_load_parameters(tmp_path):
    write(tmp_path, "good", fp32_pair(), FP32_PAIR_CONFIG)
    args = ["--repository", str(tmp_path), *SERVER, "--model-control-mode", "explicit", "--load-model", "good"]
    with ServerProcess(args) as server:
        load = f"{server.url}/v2/repository/models/%s/load"
        before = _config(server.url, "good")
        override = {"max_batch_size": 2, "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": ["16"]}]}
        changed = _post(load % "good", {"parameters": {"config": json.dumps(override)}})
        after = _config(server.url, "good")
        malformed = _post(load % "good", {"parameters": {"config": "{not json"}})
        still = _config(server.url, "good")
        unknown = _post(load % "nope", {"parameters": {"config": "{}"}})
        model = base64.b64encode(fp32_pair().SerializeToString()).decode()
        sent = _post(load % "sent", {"parameters": {"config": json.dumps({"max_batch_size": 8}),
                                                    "file:1/model.onnx": model}})  # fmt: skip
        x = np.arange(16, dtype=np.float32)
        infer = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16], "data": x.tolist()}],
                 "outputs": [{"name": "z"}]}
        answered = _post(f"{server.url}/v2/models/sent/infer", infer)
    assert server.proc.returncode == 0
    assert before["max_batch_size"] == 8 and changed == (200, {}) and after["max_batch_size"] == 2
    assert malformed[0] == 400 and malformed[1]["error"].startswith("failed to load 'good': the 'config' parameter")
    assert still == after  # what was served goes on
    assert unknown[0] == 500 and unknown[1]["error"].startswith("failed to load 'nope'")
    assert sent == (200, {})
    assert answered[0] == 200, answered
    assert answered[1]["outputs"] == [{"name": "z", "datatype": "FP32", "shape": [1, 16], "data": (2 * x).tolist()}]
