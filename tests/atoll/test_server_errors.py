"""The server's answers when the front end is slow or the server is full (aiohttp test client)."""

import asyncio
import json
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from atoll.endpoints import Endpoints
from atoll.metrics import Metrics
from atoll.repository import ModelSpec, TensorSpec
from atoll.server import InferenceServer
from atoll.shm_registry import Regions

SPEC = ModelSpec("m", "1", Path("m.onnx"), "onnxruntime_onnx", 8, [TensorSpec("x", "FP32", (2,))],
                 [TensorSpec("y", "FP32", (2,))], "none", "none")  # fmt: skip
BODY = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]})
RT_BODY = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}],
                      "parameters": {"priority": 1}})


class StuckFrontEnd:
    """A front end whose batches never come back (a hung vGPU)."""

    models = {"m": SPEC}

    async def infer(self, spec, request, priority):
        await asyncio.sleep(3600)


def _endpoints(**kw) -> Endpoints:
    return Endpoints(StuckFrontEnd(), Metrics(), Regions(), **kw)


def _post(server: Endpoints, n: int = 1, rt: int = 0) -> list[tuple[int, dict]]:
    async def go():
        async with TestClient(TestServer(InferenceServer(server, server.metrics).app(1 << 20))) as client:
            responses = await asyncio.gather(
                *(client.post("/v2/models/m/infer", data=body) for body in [BODY] * n + [RT_BODY] * rt))
            return [(r.status, await r.json()) for r in responses]

    return asyncio.run(go())


def test_unanswered_request_times_out_with_504():
    server = _endpoints(timeout_s=0.2)
    server.ready = True
    [(status, body)] = _post(server)
    assert status == 504 and "0.2 s" in body["error"]
    assert server.pending == {"rt": 0, "be": 0}  # the slot is released
    assert b'reason="TIMEOUT"' in server.metrics.render()


def test_overload_is_refused_with_503():
    server = _endpoints(max_pending=2, timeout_s=0.5)
    server.ready = True
    statuses = sorted(status for status, _ in _post(server, n=4))
    assert statuses == [503, 503, 504, 504]  # two admitted (then timed out), two refused at once


def test_best_effort_overload_never_refuses_real_time_requests():
    server = _endpoints(max_pending=2, timeout_s=0.5)
    server.ready = True
    *be, rt = _post(server, n=3, rt=1)
    assert sorted(status for status, _ in be) == [503, 504, 504]
    assert rt[0] == 504  # admitted (then timed out), not refused


def test_not_ready_is_503():
    server = _endpoints()
    [(status, body)] = _post(server)
    assert status == 503 and "starting" in body["error"]
