"""The cluster endpoint over two real `atoll serve` nodes (no Ray: a directory of fixed addresses),
driven by the real `tritonclient` over HTTP and gRPC: both nodes get work, the index, statistics and
metrics are the cluster's, model control reaches the nodes (and a node that joins later), shared
memory is refused naming the limit, and a node killed under a closed loop of requests leaves every
request answered once, 200 or 503."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from atoll.bench.bodies import tensor_body
from atoll.cluster.directory import NodeAddress
from atoll.cluster.endpoint import Endpoint
from atoll.config import load_config
from atoll.repository.demo import demo_repository
from atoll.supervisor.server_process import ServerProcess
from tests.atoll.client_env import run_client
from tests.atoll.probes import PATIENCE_S, ClosedLoop, until

MODEL = "mobilenet_v3_small"  # the demo repository's lightest model taking a ready tensor
METRICS = re.compile(r"\(metrics http://(\S+)/metrics\)")
pytestmark = pytest.mark.timeout(600)


class Nodes:
    """A directory whose nodes the test changes."""

    def __init__(self):
        self.listed: list[NodeAddress] = []

    def nodes(self) -> list[NodeAddress]:
        return list(self.listed)


def _node(repository, *load: str) -> ServerProcess:
    loads = [arg for model in load for arg in ("--load-model", model)]
    server = ServerProcess(["--repository", str(repository), "--backend", "cpu", "--set", "vgpus.cpu_vgpus=1",
                            "--front-ends", "1", "--model-control-mode", "explicit", *loads, "--metrics-port", "0"])
    return server.__enter__()


def _address(name: str, server: ServerProcess) -> NodeAddress:
    metrics = next(m.group(1) for line in server.log if (m := METRICS.search(line)))
    return NodeAddress(name, server.url.removeprefix("http://"), server.grpc_address, metrics)


class Running:
    """The endpoint on an event loop of its own thread."""

    def __init__(self, directory, **settings):
        config = load_config(None, {"server.http_port": 0, "server.grpc_port": 0, "server.metrics_port": 0,
                                    "server.drain_s": 1.0, **settings})  # fmt: skip
        self.endpoint = Endpoint(directory, config)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.call(self.endpoint.start())

    def call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(PATIENCE_S)

    def stop(self) -> None:
        self.call(self.endpoint.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(PATIENCE_S)


@pytest.fixture(scope="module")
def cluster():
    repository = demo_repository()
    with ThreadPoolExecutor(2) as pool:
        servers = list(pool.map(lambda _: _node(repository, MODEL), range(2)))
    directory = Nodes()
    directory.listed = [_address(name, s) for name, s in zip("ab", servers)]
    running = Running(directory)
    try:
        yield running, servers, directory, repository
    finally:
        running.stop()
        for server in servers:
            server.stop()


def _get(url: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=PATIENCE_S) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _successes(url: str) -> int:
    status, body = _get(f"{url}/v2/models/{MODEL}/stats")
    assert status == 200, body
    return json.loads(body)["model_stats"][0]["inference_stats"]["success"]["count"]


CLIENT = """
import json, sys
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

node, http, grpc = sys.argv[1:4]
tensor = np.random.default_rng(0).normal(size=(1, 3, 224, 224)).astype(np.float32)
out = {}

def infer(module, url, n, **kw):
    client = module.InferenceServerClient(url)
    t = module.InferInput("input", list(tensor.shape), "FP32")
    t.set_data_from_numpy(tensor)
    return [client.infer("mobilenet_v3_small", [t], **kw).as_numpy("logits").tolist() for _ in range(n)]

out["direct"] = infer(httpclient, node, 1)[0]
out["http"] = infer(httpclient, http, 6)
out["http_rt"] = infer(httpclient, http, 2, priority=1)
out["grpc"] = infer(grpcclient, grpc, 6)
results = []
client = grpcclient.InferenceServerClient(grpc)
client.start_stream(callback=lambda result, error: results.append(error or result))
t = grpcclient.InferInput("input", list(tensor.shape), "FP32")
t.set_data_from_numpy(tensor)
for i in range(4):
    client.async_stream_infer("mobilenet_v3_small", [t], request_id=str(i))
client.stop_stream()
out["stream"] = [r.as_numpy("logits").tolist() for r in results]
for name, module, url in (("http", httpclient, http), ("grpc", grpcclient, grpc)):
    try:
        module.InferenceServerClient(url).register_system_shared_memory("r", "/atoll-r", 64)
        out[name + " shm"] = "registered"
    except InferenceServerException as exc:
        out[name + " shm"] = [str(exc.status()), exc.message()]
c = grpcclient.InferenceServerClient(grpc)
out["grpc ready"] = [c.is_server_ready(), c.is_model_ready("mobilenet_v3_small"), c.is_model_ready("citrinet")]
out["grpc index"] = {m.name: m.state for m in c.get_model_repository_index().models}
out["grpc stats"] = c.get_inference_statistics("mobilenet_v3_small").model_stats[0].inference_stats.success.count
out["grpc metadata"] = c.get_model_metadata("mobilenet_v3_small").name
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def served(cluster):
    running, servers, _, _ = cluster
    e = running.endpoint
    out = run_client(CLIENT, servers[0].url.removeprefix("http://"), e.http_url.removeprefix("http://"),
                     e.grpc_address)  # fmt: skip
    return json.loads(out)


def test_tritonclient_infers_through_the_endpoint_and_both_nodes_serve(cluster, served):
    _, servers, _, _ = cluster
    direct = np.array(served["direct"])
    for path in ("http", "http_rt", "grpc", "stream"):
        assert len(served[path]) == {"http": 6, "http_rt": 2, "grpc": 6, "stream": 4}[path]
        for logits in served[path]:
            np.testing.assert_allclose(np.array(logits), direct, rtol=1e-4, atol=1e-4)
    assert all(_successes(s.url) >= 4 for s in servers)  # 18 requests spread over the two, in turn when idle


def test_shared_memory_is_refused_naming_the_limit(served):
    assert served["http shm"][0] == "501" and "a region lives on one machine" in served["http shm"][1]
    assert served["grpc shm"][0] == "StatusCode.UNIMPLEMENTED" and "region lives on one" in served["grpc shm"][1]


def test_index_statistics_health_and_metadata_are_the_clusters(cluster, served):
    running, servers, _, _ = cluster
    url = running.endpoint.http_url
    assert served["grpc ready"] == [True, True, False]
    assert served["grpc index"] == {MODEL: "READY", "citrinet": ""}
    assert served["grpc metadata"] == MODEL
    status, body = _get(f"{url}/v2/repository/index", b"{}")
    assert status == 200 and {m["name"]: m.get("state", "") for m in json.loads(body)} == served["grpc index"]
    assert _get(f"{url}/v2/health/ready")[0] == 200
    head = urllib.request.Request(f"{url}/v2/models/{MODEL}", method="HEAD")  # forwarded as a GET, answered bodiless
    with urllib.request.urlopen(head, timeout=PATIENCE_S) as r:
        assert r.status == 200 and r.read() == b""
    total = sum(_successes(s.url) for s in servers)
    assert _successes(url) == total and served["grpc stats"] >= 18


def test_metrics_carry_each_nodes_label_and_the_endpoints_counters(cluster, served):
    running, _, _, _ = cluster
    status, body = _get(f"{running.endpoint.metrics_url}/metrics")
    assert status == 200
    samples = [s for f in text_string_to_metric_families(body.decode()) for s in f.samples]
    success = {s.labels["node"]: s.value for s in samples
               if s.name == "nv_inference_request_success_total" and s.labels.get("model") == MODEL}  # fmt: skip
    assert set(success) == {"a", "b"} and all(v >= 4 for v in success.values())
    forwarded = {s.labels["node"]: s.value for s in samples if s.name == "atoll_cluster_forwarded_total"}
    assert set(forwarded) == {"a", "b"} and sum(forwarded.values()) >= 18
    assert _get(f"{running.endpoint.http_url}/metrics")[1] != b""


def test_unload_and_load_reach_the_nodes_and_replicas_bound_them(cluster, served):
    running, servers, _, _ = cluster
    url = running.endpoint.http_url

    def ready_on() -> list[bool]:
        return [_get(f"{s.url}/v2/models/{MODEL}/ready")[0] == 200 for s in servers]

    assert _get(f"{url}/v2/repository/models/{MODEL}/unload", b"")[0] == 200
    assert ready_on() == [False, False]
    body, headers = tensor_body("input", np.zeros((1, 3, 224, 224), np.float32))
    assert _post(f"{url}/v2/models/{MODEL}/infer", body, headers)[0] == 503
    one = json.dumps({"parameters": {"replicas": 1}}).encode()
    assert _get(f"{url}/v2/repository/models/{MODEL}/load", one)[0] == 200
    assert sorted(ready_on()) == [False, True]
    assert _post(f"{url}/v2/models/{MODEL}/infer", body, headers)[0] == 200
    assert _get(f"{url}/v2/repository/models/{MODEL}/load", b"")[0] == 200  # every node, by default
    assert ready_on() == [True, True]


def _post(url: str, body: bytes, headers: dict) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=PATIENCE_S) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_a_node_killed_under_load_leaves_every_request_answered_once_and_a_new_node_gets_the_model(cluster):
    running, servers, directory, repository = cluster
    url = running.endpoint.http_url
    body, headers = tensor_body("input", np.zeros((1, 3, 224, 224), np.float32))
    with ClosedLoop(f"{url}/v2/models/{MODEL}/infer", body, headers, clients=4) as loop:
        until(lambda: loop.count(200) >= 8, "requests answered before the kill")
        killed = time.monotonic()
        servers[1].proc.kill()
        until(lambda: loop.count(200, after=killed) >= 12, "requests answered after the kill")
    outcomes = [o for _, o in loop.outcomes]
    assert len(outcomes) == loop.sent  # every request answered once, none hung
    assert set(outcomes) <= {200, 503}, sorted(set(map(str, outcomes)))
    until(lambda: running.endpoint.view.candidates(MODEL) == ["a"], "the killed node out of the routing")

    assert _get(f"{url}/v2/repository/models/{MODEL}/load", b"")[0] == 200  # placed on every node
    joining = _node(repository)  # explicit mode, nothing loaded: the endpoint gives it what is placed
    try:
        directory.listed = [directory.listed[0], _address("c", joining)]
        until(lambda: _get(f"{joining.url}/v2/models/{MODEL}/ready")[0] == 200, "the placed model on the new node")
        until(lambda: sorted(running.endpoint.view.candidates(MODEL)) == ["a", "c"], "the new node in the routing")
    finally:
        joining.stop()
