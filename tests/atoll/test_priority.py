"""Request priority (Triton's `priority` parameter, ARCHITECTURE §8): level 1 runs as real-time
work. End to end, the real `tritonclient.http` sends priority 1 to `atoll serve` running the REEF
scheduler in its vGPU worker (numpy executor, `reset`); outputs are compared with onnxruntime."""

from __future__ import annotations

import json
import os
import urllib.request

import numpy as np
import onnxruntime
import pytest
from gpu_runtime.priority import RT_FIFO, Priority
from tests.atoll.client_env import run_client
from tests.gpu_runtime.chain_model import matmul_chain
from tests.gpu_runtime.test_priority_threads import fifo_permitted

from atoll.supervisor.server_process import ServerProcess
from atoll.front_end.rows import priority_of
from atoll.kserve.protocol import InferRequest, ProtocolError
from atoll.repository.specs import load_model

CONFIG = """
name: "chain"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 768 ] } ]
output [ { name: "h6" data_type: TYPE_FP32 dims: [ 768 ] } ]
dynamic_batching { max_queue_delay_microseconds: 1000 %s }
"""


def _repository(root, default_priority: str = ""):
    (root / "chain" / "1").mkdir(parents=True)
    (root / "chain" / "config.pbtxt").write_text(CONFIG % default_priority)
    matmul_chain(root / "chain" / "1" / "model.onnx", np.random.default_rng(11), layers=6)
    return root


def _request(**parameters) -> InferRequest:
    return InferRequest(None, [], [], parameters)


def test_priority_levels_map_to_rt_and_be(tmp_path):
    be_model = load_model(_repository(tmp_path / "a") / "chain")
    rt_model = load_model(_repository(tmp_path / "b", "default_priority_level: 1") / "chain")
    assert (be_model.default_priority_level, rt_model.default_priority_level) == (0, 1)
    assert priority_of(be_model, _request().parameters) == Priority.BE
    assert priority_of(be_model, _request(priority=1).parameters) == Priority.RT
    assert priority_of(be_model, _request(priority=2).parameters) == Priority.BE
    assert priority_of(rt_model, _request().parameters) == Priority.RT  # 0: the model's default level
    assert priority_of(rt_model, _request(priority=0).parameters) == Priority.RT
    assert priority_of(rt_model, _request(priority=3).parameters) == Priority.BE
    for bad in (-1, "1", 1.5, True):
        with pytest.raises(ProtocolError, match="non-negative integer"):
            priority_of(be_model, _request(priority=bad).parameters)


TRITON_CLIENT = r"""
import sys, json, numpy as np, tritonclient.http as httpclient
url = sys.argv[1].replace("http://", "")
x = np.load(sys.argv[2])
client = httpclient.InferenceServerClient(url=url)
out = {}
for priority in (0, 1):
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    res = client.infer("chain", [inp], priority=priority)
    out[priority] = res.as_numpy("h6").tolist()
print(json.dumps(out))
"""


@pytest.mark.timeout(600)
def test_tritonclient_priority_runs_as_rt_on_the_reef_worker(tmp_path):
    repository = _repository(tmp_path / "repo")
    x = np.random.default_rng(12).standard_normal((2, 768)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    session = onnxruntime.InferenceSession(str(repository / "chain" / "1" / "model.onnx"))
    expected = session.run(None, {"x": x})[0]
    args = ["--repository", str(repository), "--backend", "cpu",
            "--set", "vgpus.executor=numpy", "--set", "vgpus.cpu_vgpus=1",
            "--set", "scheduler.policy=reset"]  # fmt: skip
    with ServerProcess(args) as server:
        out = json.loads(run_client(TRITON_CLIENT, server.url, str(tmp_path / "x.npy")))
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=30) as r:
            metrics = r.read().decode()
        children = server.children()
        # the relays a real-time request passes: the supervisor's and the front end's loops, the
        # worker's receiving thread (each its process's main thread)
        relays = [server.proc.pid, *children["front_end"], *children["vgpu"]]
        policies = {(os.sched_getscheduler(pid), os.sched_getparam(pid).sched_priority) for pid in relays}
    assert server.proc.returncode == 0, "\n".join(server.log[-20:])
    assert len(relays) == 3 and policies == ({(os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, RT_FIFO)} if fifo_permitted()
                                             else {(os.SCHED_OTHER, 0)})  # fmt: skip
    for priority in ("0", "1"):
        np.testing.assert_allclose(np.array(out[priority], np.float32), expected, rtol=1e-4, atol=1e-5)
    # the RT request skipped the buckets: one batch of its two rows, labelled "rt"
    assert 'atoll_batch_size_count{bucket="rt",model="chain",vgpu="cpu0"} 1.0' in metrics
    assert 'atoll_batch_size_count{bucket="0",model="chain",vgpu="cpu0"}' in metrics
