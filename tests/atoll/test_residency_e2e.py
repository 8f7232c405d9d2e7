"""Residency end to end (docs/residency.md): `atoll serve` on one CPU vGPU whose weight budget holds
two of three models serves all three through the real `tritonclient`, every model READY, answers
equal to onnxruntime's, with switches, evictions, the bytes moved and the resident bytes in the
Prometheus metrics; a pair of models taking turns with the third idle does not thrash."""

from __future__ import annotations

import json
import re
import urllib.request

import numpy as np
import onnxruntime
import pytest

from gpu_runtime.compiler.shapes import ModelShapes
from gpu_runtime.residency.pool import aligned
from tests.atoll.client_env import run_client

from atoll.bench.switch_models import repository
from atoll.supervisor.server_process import ServerProcess

CLIENT = r"""
import sys, json, numpy as np, tritonclient.http as httpclient
client = httpclient.InferenceServerClient(url=sys.argv[1].replace("http://", ""))
x = np.load(sys.argv[2])
out = {"ready": {m: client.is_model_ready(m) for m in ("m0", "m1", "m2")}, "answers": []}
for model in sys.argv[3].split(","):
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    out["answers"].append([model, client.infer(model, [inp]).as_numpy("r6").tolist()])
print(json.dumps(out))
"""


def _metric(text: str, name: str, model: str | None = None) -> float:
    label = f'model="{model}",' if model else ""
    return sum(float(v) for v in re.findall(rf'^{name}{{{label}[^}}]*}} (\S+)$', text, re.M))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tritonclient_serves_more_models_than_the_budget_holds(tmp_path):
    repo = tmp_path / "repo"
    paths = repository(repo, ["m0", "m1", "m2"], layers=6, width=128, max_batch=2)
    weights = ModelShapes(paths["m0"]).program((1, None)).weight_bytes
    budget_mb = (2 * aligned(weights) + 4096) / (1 << 20)
    x = np.random.default_rng(7).standard_normal((1, 128)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    # m0 and m2 take turns, m1 sits idle: after m2 evicts m1 (the least recently used idle model
    # once m0 has run), the turns hit; then m1 comes back once
    order = ["m0", "m2", "m0", "m2", "m0", "m2", "m1"]
    args = ["--repository", str(repo), "--backend", "cpu", "--set", "vgpus.executor=numpy",
            "--set", "vgpus.cpu_vgpus=1", "--set", f"residency.budget_mb={budget_mb}",
            "--set", "residency.bandwidth_gb_s=0.05"]  # fmt: skip
    with ServerProcess(args) as server:
        out = json.loads(run_client(CLIENT, server.url, str(tmp_path / "x.npy"), ",".join(order)))
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=30) as r:
            metrics = r.read().decode()
    assert server.proc.returncode == 0, "\n".join(server.log[-20:])
    assert out["ready"] == {"m0": True, "m1": True, "m2": True}
    for model, answer in out["answers"]:
        expected = onnxruntime.InferenceSession(paths[model]).run(None, {"x": x})[0]
        np.testing.assert_allclose(np.array(answer, np.float32), expected, rtol=1e-4, atol=1e-5)
    # m0 and m1 fit at load; m2's warm-up switched it in, evicting m0 (least recently used); m0's
    # first request evicted m1 (idle, older than m2); then m0 and m2 took turns, all hits (no
    # thrash), until m1 came back, evicting m0
    switches = {m: _metric(metrics, "atoll_model_switches_total", m) for m in ("m0", "m1", "m2")}
    evictions = {m: _metric(metrics, "atoll_model_evictions_total", m) for m in ("m0", "m1", "m2")}
    assert switches == {"m0": 1, "m1": 1, "m2": 1}
    assert evictions == {"m0": 2, "m1": 1, "m2": 0}
    assert _metric(metrics, "atoll_model_switch_bytes_total") == 3 * weights
    # each switch moves 0.39 MB at 0.05 GB/s: 7.9 ms at least
    duration, startup = (_metric(metrics, f"atoll_model_switch_{k}_us_total") for k in ("duration", "startup"))
    assert duration >= 3 * weights / 0.05e3 and startup > 0
    assert _metric(metrics, "atoll_resident_weight_bytes") == 2 * weights
