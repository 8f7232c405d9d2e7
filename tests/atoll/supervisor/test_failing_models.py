"""A model that does not load is contained: a real `atoll serve` over a repository holding a good model,
a corrupt ONNX file and a config that contradicts its graph serves the good one, shows the two
UNAVAILABLE with their reasons, answers them not-ready, logs one line each and no traceback; with
`--exit-on-error` (the default) the same start stops with one clear line and Triton's exit status."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import numpy as np
import pytest
from tests.atoll.probes import PATIENCE_S, request
from tests.atoll.user_models import FP32_PAIR_CONFIG, fp32_pair, write

from atoll.supervisor.server_process import ServerProcess

SERVER = ["--backend", "cpu", "--set", "vgpus.cpu_vgpus=1", "--front-ends", "1"]


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("failing")
    write(root, "good", fp32_pair(), FP32_PAIR_CONFIG)
    write(root, "corrupt", b"\x08\x07not an onnx graph", FP32_PAIR_CONFIG)
    write(root, "contradicting", fp32_pair(), FP32_PAIR_CONFIG.replace('name: "x"', 'name: "features"'))
    write(root, "bare", fp32_pair(), None)  # no config.pbtxt: completed from the graph
    return root


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=PATIENCE_S) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_the_good_model_serves_and_the_failed_ones_are_reported(repository):
    with ServerProcess(["--repository", str(repository), *SERVER, "--exit-on-error", "false"]) as server:
        status, index = _post(f"{server.url}/v2/repository/index", {})
        ready = {m: request(f"{server.url}/v2/models/{m}/ready") for m in ("good", "corrupt", "contradicting")}
        x = np.arange(16, dtype=np.float32)
        infer = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16], "data": x.tolist()}]}
        answered, body = _post(f"{server.url}/v2/models/good/infer", infer)
        server_ready = request(f"{server.url}/v2/health/ready")
        with urllib.request.urlopen(f"{server.url}/v2/models/bare/config", timeout=PATIENCE_S) as r:
            bare = json.loads(r.read())
        bare_answer = _post(f"{server.url}/v2/models/bare/infer", infer)
    assert server.proc.returncode == 0
    assert status == 200
    states = {m["name"]: m for m in index}
    assert states["good"]["state"] == states["bare"]["state"] == "READY"
    for name in ("corrupt", "contradicting"):
        assert states[name]["state"] == "UNAVAILABLE" and states[name]["reason"], states[name]
    assert "config.pbtxt input 'features' is not in the graph, whose inputs are x" in states["contradicting"]["reason"]
    assert "not a readable ONNX model" in states["corrupt"]["reason"]
    assert bare["max_batch_size"] == 4  # Triton's default for a graph that can batch
    assert bare["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [16]}]
    assert [o["name"] for o in bare["output"]] == ["y", "z"]
    assert bare_answer == (answered, body | {"model_name": "bare"})
    assert ready == {"good": 200, "corrupt": 400, "contradicting": 400}
    assert server_ready == 200  # ready: every model it serves is
    assert answered == 200
    outputs = {o["name"]: o["data"] for o in body["outputs"]}
    assert outputs == {"y": (x + 1).tolist(), "z": (2 * x).tolist()}
    log = "\n".join(server.log)
    assert "Traceback" not in log
    for name in ("corrupt", "contradicting"):
        lines = [line for line in server.log if f"failed to load '{name}'" in line]
        assert len(lines) == 1, lines
        assert states[name]["reason"] in lines[0]


def test_exit_on_error_stops_the_start_with_one_line(repository):
    proc = subprocess.run([sys.executable, "-m", "atoll", "serve", "--repository", str(repository), *SERVER,
                           "--http-port", "0", "--grpc-port", "0", "--metrics-port", "-1"],
                          capture_output=True, text=True, timeout=PATIENCE_S, check=False)  # fmt: skip
    assert proc.returncode == 1  # Triton's exit status for models that failed to load
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("atoll serve: failed to load ") and "contradicting" in last and "corrupt" in last
    assert "Traceback" not in proc.stderr + proc.stdout
