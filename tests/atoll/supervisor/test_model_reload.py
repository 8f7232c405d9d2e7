"""Loading and unloading models while serving: a model loaded again answers as it did the first time
(it answered all zeros: its vGPU worker kept the old slot arena mapped under the same name), a load
of anything but a folder of the repository is refused and changes nothing served, and a load that
fails part way takes back what it did (`Supervisor.add_model`, over stand-ins for the workers and the
front ends)."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
from gpu_runtime.vgpu.discovery import VGpuInfo
from gpu_runtime.zoo import build
from gpu_runtime.zoo.repository import write_model
from tests.atoll.probes import PATIENCE_S, request, serving, until
from tests.atoll.test_server_e2e import _reference_logits
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from atoll.bench.bodies import infer_body
from atoll.bench.corpus import jpeg_bytes
from atoll.config import load_config
from atoll.observe.metrics import Metrics
from atoll.repository.specs import ModelSpec, TensorSpec
from atoll.supervisor.model_batching import Batching
from atoll.supervisor.parts import Parts
from atoll.supervisor.supervisor import Supervisor
from atoll.wire.model_control import AddModel, RetireModel

MODEL = "mobilenet_v3_small"

# ---- Supervisor.add_model over stand-ins ------------------------------------------------------------


class Pool:
    workers = {"cpu0": None}

    def __init__(self):
        self.loaded: set[str] = set()

    def load_model(self, name, *args):
        self.loaded.add(name)
        return {"cpu0": {"out_row_bytes": 40}}

    def unload_model(self, name):
        self.loaded.discard(name)


class Dispatcher:
    def __init__(self):
        self.plans = {}

    def add_model(self, plan, settings):
        self.plans[plan.key] = plan

    def remove_model(self, name):
        del self.plans[name]


class FrontEnds:
    """Two front ends; the second cannot attach arenas when `fail` is set."""

    def __init__(self, fail=False):
        self.fail = fail
        self.models = [set(), set()]

    async def apply(self, change):
        for index, models in enumerate(self.models):
            match change:
                case AddModel(spec=spec) if not (self.fail and index == 1):
                    models.add(spec.key)
                case RetireModel(name=name):
                    models.discard(name)
        if self.fail and isinstance(change, AddModel):
            raise RuntimeError("front end 1 cannot attach")


class StandIns(Parts):
    """The supervisor's parts: stand-ins for the workers and the front ends, the real batching."""

    def __init__(self, front_ends: FrontEnds):
        self.front_ends = front_ends

    def channels(self):
        return self.front_ends

    def front_end_count(self, config):
        return len(self.front_ends.models)

    def batching(self, config, kinds, latency, slots, switch_time):
        return Batching(config, kinds, lambda *a: 1e-3)

    def pool(self, config, vgpus, executor, residency, on_change):
        return Pool()

    def python(self, url, on_change):
        return None

    def dispatcher(self, pool, batcher, metrics, latency, kinds, python, residency):
        return Dispatcher()


def service(front_ends: FrontEnds) -> Supervisor:
    """A supervisor over stand-ins (run on an event loop: its parts call back on it)."""
    s = Supervisor(load_config(), Path("."), progress=False, parts=StandIns(front_ends))
    s.metrics = Metrics()
    s.assemble([VGpuInfo("cpu0", "cpu", "cpu", None, "cpu", None, None)], None, "127.0.0.1:0")
    return s


def spec(name: str) -> ModelSpec:
    return ModelSpec(name, "1", Path("m.onnx"), "onnxruntime_onnx", 4, [TensorSpec("x", "FP32", (2,))],
                     [TensorSpec("y", "FP32", (10,))], "none", "none")  # fmt: skip


def state(s: Supervisor) -> tuple:
    return (set(s.models), set(s._arenas), set(s.dispatcher.plans), set(s.pool.loaded),
            [set(m) for m in s._channels.models])  # fmt: skip


def shm_names(s: Supervisor) -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith(s._arena_prefix)}


def test_a_load_that_fails_part_way_leaves_the_served_models_as_they_were():
    async def go():
        front_ends = FrontEnds()
        s = service(front_ends)
        await s.add_model(spec("a"))
        before, arenas = state(s), shm_names(s)
        front_ends.fail = True
        with pytest.raises(RuntimeError, match="cannot attach"):
            await s.add_model(spec("b"))
        assert state(s) == before and shm_names(s) == arenas  # b's arenas are gone too
        with pytest.raises(ValueError, match="already served"):  # refused before any worker loads
            await s.add_model(spec("a"))
        assert state(s) == before
        front_ends.fail = False
        await s.remove_model(spec("a").key)
        await s.add_model(spec("a"))  # loaded again: arenas of new names
        assert not arenas & shm_names(s) and len(shm_names(s)) == 2
        await s.remove_model(spec("a").key)
        assert shm_names(s) == set()

    asyncio.run(go())


# ---- end to end ------------------------------------------------------------------------------------


def post(url: str, body: bytes = b"", headers: dict | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, headers=headers or {}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=PATIENCE_S) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def logits(url: str, jpeg: bytes) -> np.ndarray:
    until(lambda: request(f"{url}/v2/models/{MODEL}/ready") == 200, f"{MODEL} ready")
    body, headers = infer_body("image", [jpeg])
    status, payload = post(f"{url}/v2/models/{MODEL}/infer", body, headers)
    assert status == 200, payload[:300]
    return np.frombuffer(payload[-4000:], "<f4")


def test_a_model_loaded_again_answers_as_before_and_path_loads_change_nothing(tmp_path):
    root, outside = tmp_path / "repo", tmp_path / "outside"
    # Outside the repository: a folder named as the served model (its config too) holding another
    # network, and one of a new name.
    write_model(outside, "squeezenet1_1", build("squeezenet1_1"))
    alias = outside / MODEL
    (outside / "squeezenet1_1").rename(alias)
    (alias / "config.pbtxt").write_text((alias / "config.pbtxt").read_text().replace('"squeezenet1_1"', f'"{MODEL}"'))
    write_model(outside, "squeezenet1_1", build("squeezenet1_1"))
    jpeg = jpeg_bytes(320, 240, seed=11)
    root.mkdir()
    with serving(root, MODEL, "--model-control-mode", "explicit", "--load-model", MODEL) as s:
        want = _reference_logits(root, jpeg)
        first = logits(s.url, jpeg)
        np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-4)

        models = f"{s.url}/v2/repository/models"
        for name in (str(alias), f"../outside/{MODEL}", str(outside / "squeezenet1_1"), "..%2Foutside%2Fsqueezenet1_1"):
            quoted = urllib.request.quote(name, safe="%")
            for call in ("load", "unload"):
                status, payload = post(f"{models}/{quoted}/{call}")
                assert status == 400 and "model name" in json.loads(payload)["error"], (name, call, payload)
        status, payload = post(f"{models}/{'x' * 300}/load")
        assert status == 400 and "is 300 bytes long; at most 255" in json.loads(payload)["error"]
        status, payload = post(f"{models}/{MODEL}/load", json.dumps({"parameters": [1, 2]}).encode(),
                               {"Content-Type": "application/json"})  # fmt: skip
        assert status == 400 and "JSON object" in json.loads(payload)["error"]
        with grpc.insecure_channel(s.grpc_address) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            for name in (f"../../{outside.name}/squeezenet1_1", "", ".", "..", "a\\b", "x" * 300):
                with pytest.raises(grpc.RpcError) as refused:
                    stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name=name), timeout=PATIENCE_S)
                assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
        status, payload = post(f"{s.url}/v2/repository/index")
        assert [m["name"] for m in json.loads(payload)] == [MODEL]
        np.testing.assert_array_equal(logits(s.url, jpeg), first)  # the served model is unchanged

        for _ in range(2):
            assert post(f"{models}/{MODEL}/unload")[0] == 200
            until(lambda: request(f"{s.url}/v2/models/{MODEL}/ready") != 200, f"{MODEL} unloaded")
            assert post(f"{models}/{MODEL}/load")[0] == 200
            np.testing.assert_allclose(logits(s.url, jpeg), want, rtol=1e-4, atol=1e-4)
        assert not any("Traceback" in line for line in s.log), "\n".join(s.log[-30:])
