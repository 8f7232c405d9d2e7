"""Atoll nodes on a real two-raylet Ray cluster (issue 33): one per Ray node, each serving; a killed
`atoll serve` restarted by Ray; a Ray node that leaves leaves the directory, one that comes joins;
the cluster's endpoint serving them, every request answered once while one is killed under load;
`atoll cluster up|status|down` finding, listing and stopping them.

One cluster and one controller for the module; every wait is bounded by probes.PATIENCE_S.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter

import numpy as np
import pytest
from tests.atoll.probes import PATIENCE_S, ClosedLoop, alive, request, until, zoo_repository

from atoll.bench.bodies import tensor_body
from atoll.cluster.directory import NodeAddress
from atoll.cluster.local import NODE_ARGS
from atoll.cluster.membership import find_controller, start_controller, stop_controller
from atoll.cluster.nodes import node_name
from atoll.cluster.ray_directory import RayDirectory
from atoll.kserve.protocol import HEADER_LENGTH
from atoll.supervisor.server_process import ServerProcess

ray = pytest.importorskip("ray", reason="ray is not installed (the cluster extra)")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * PATIENCE_S)]

MODEL = "mobilenet_v3_small"  # the demo's lighter model, sent a ready tensor
SERVE = ["--backend", "cpu", "--set", "vgpus.cpu_vgpus=1", "--front-ends", "1"]
X = np.random.default_rng(3).standard_normal((1, 3, 224, 224), dtype=np.float32)


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return zoo_repository(tmp_path_factory.mktemp("repo"), MODEL)


@pytest.fixture(scope="module")
def directory(ray_cluster, repository):
    start_controller(str(repository), [MODEL], SERVE)
    try:
        directory = RayDirectory()
        yield directory
        directory.close()
    finally:
        stop_controller()


def node_ids(cluster) -> set[str]:
    return {node_name(n.node_id) for n in cluster.list_all_nodes()}


def logits(address) -> np.ndarray:
    body, headers = tensor_body("input", X)
    req = urllib.request.Request(f"http://{address.http}/v2/models/{MODEL}/infer", body, headers, method="POST")
    with urllib.request.urlopen(req, timeout=PATIENCE_S) as r:
        payload, n = r.read(), int(r.headers[HEADER_LENGTH])
    (out,) = json.loads(payload[:n])["outputs"]
    return np.frombuffer(payload[n:], dtype=np.float32).reshape(out["shape"])


def child_pid(name: str) -> int:
    actors = ray.get(find_controller().actors.remote())
    return ray.get(actors[name].pid.remote())


def test_one_atoll_node_per_ray_node_each_serving(ray_cluster, directory):
    nodes = until(lambda: len(found := directory.nodes()) == 2 and found, "both nodes ready")
    assert {a.name for a in nodes} == node_ids(ray_cluster)
    assert all(a.http and a.grpc and a.metrics for a in nodes)
    first, second = (logits(a) for a in nodes)
    assert first.shape == (1, 1000) and np.array_equal(first, second)  # one model, same answer


def test_a_killed_atoll_serve_is_restarted_by_ray(directory):
    victim = until(lambda: len(found := directory.nodes()) == 2 and found[0], "both nodes ready")
    pid = child_pid(victim.name)
    os.kill(pid, signal.SIGKILL)
    until(lambda: not alive(pid), "the killed atoll serve is gone")
    back = until(lambda: next((a for a in directory.nodes() if a.name == victim.name and a != victim), None),
                 "the node is ready again at its new ports")  # fmt: skip
    assert child_pid(victim.name) != pid
    assert logits(back).shape == (1, 1000)


def test_a_node_actor_killed_for_good_is_placed_anew(directory):
    victim = until(lambda: len(found := directory.nodes()) == 2 and found[-1], "both nodes ready")
    actors = ray.get(find_controller().actors.remote())
    pid = ray.get(actors[victim.name].pid.remote())
    ray.kill(actors[victim.name], no_restart=True)
    until(lambda: not alive(pid), "its atoll serve ends with it")
    back = until(lambda: next((a for a in directory.nodes() if a.name == victim.name and a != victim), None),
                 "a new node actor is ready on that Ray node")  # fmt: skip
    assert ray.get(find_controller().actors.remote())[victim.name] != actors[victim.name]
    assert logits(back).shape == (1, 1000)


def test_a_ray_node_that_leaves_leaves_and_a_new_one_joins(ray_cluster, directory):
    until(lambda: len(directory.nodes()) == 2, "both nodes ready")
    leaving = ray_cluster.list_all_nodes()[-1]  # not the head, which holds the controller
    name = node_name(leaving.node_id)
    pid = child_pid(name)
    ray_cluster.remove_node(leaving)
    until(lambda: name not in {a.name for a in directory.nodes()}, "the node leaves the directory")
    until(lambda: not alive(pid), "its atoll serve ends with it")
    joining = node_name(ray_cluster.add_node(**NODE_ARGS).node_id)
    nodes = until(lambda: len(found := directory.nodes()) == 2 and found, "the new node joins")
    assert {a.name for a in nodes} == node_ids(ray_cluster) and joining in {a.name for a in nodes}
    assert all(logits(a).shape == (1, 1000) for a in nodes)


def test_the_controller_answers_a_directory_once_its_nodes_differ(directory):
    nodes = until(lambda: len(found := directory.nodes()) == 2 and found, "both nodes ready")
    controller = find_controller()
    # differing: answered at once, long before the wait it was allowed (a wait would time the get out)
    assert len(ray.get(controller.nodes_after.remote([], 100 * PATIENCE_S), timeout=PATIENCE_S)) == 2
    assert len(ray.get(controller.nodes_after.remote(nodes, 0.1), timeout=PATIENCE_S)) == 2  # the same: after 0.1 s


def test_a_directory_asks_a_controller_of_an_older_atoll_as_it_did(ray_cluster):
    class OlderController:  # (defined here: Ray's workers get it by value, not by importing the tests)
        """A controller of an Atoll before `nodes_after`: its nodes, one more at each ask up to three."""

        def __init__(self):
            self.asked = 0

        def nodes(self) -> list[NodeAddress]:
            self.asked += 1
            return [NodeAddress(f"n{i}", f"127.0.0.1:{i + 1}", "", "") for i in range(min(self.asked, 3))]

    older = ray.remote(OlderController).options(num_cpus=0).remote()
    directory = RayDirectory(older)
    try:
        until(lambda: len(directory.nodes()) == 3, "the directory asks again and again")
    finally:
        directory.close()
        ray.kill(older)


# serve_cluster as `atoll serve --cluster` runs it (a controller running already: found, not stopped)
ENDPOINT = """import sys
from atoll.cluster.runtime import serve_cluster
from atoll.config import load_config
ports = {"server.http_port": 0, "server.grpc_port": 0, "server.metrics_port": -1}
serve_cluster(sys.argv[1], sys.argv[2], [], [], load_config(None, ports))
"""


def test_the_endpoint_serves_the_ray_nodes_and_a_node_killed_under_load(ray_cluster, repository, directory):
    nodes = until(lambda: len(found := directory.nodes()) == 2 and found, "both nodes ready")
    endpoint = ServerProcess(start_timeout_s=PATIENCE_S)
    endpoint.args = [sys.executable, "-c", ENDPOINT, ray_cluster.address, str(repository)]
    with endpoint:
        entry = NodeAddress("endpoint", endpoint.url.removeprefix("http://"), endpoint.grpc_address, "")
        until(lambda: request(f"{endpoint.url}/v2/models/{MODEL}/ready") == 200, "the endpoint has the model")
        assert np.array_equal(logits(entry), logits(nodes[0]))
        victim = nodes[0]
        with ClosedLoop(f"{endpoint.url}/v2/models/{MODEL}/infer", *tensor_body("input", X), clients=4) as load:
            until(lambda: load.count(200) >= 8, "requests succeed before the kill")
            os.kill(child_pid(victim.name), signal.SIGKILL)
            killed_at = time.monotonic()
            until(lambda: any(a.name == victim.name and a != victim for a in directory.nodes()), "the node rejoins")
            until(lambda: load.count(200, after=killed_at) >= 8, "requests succeed after the kill")
    assert endpoint.proc.returncode == 0, "\n".join(endpoint.log[-20:])
    assert len(load.outcomes) == load.sent  # every request answered once
    assert {o for _, o in load.outcomes} <= {200, 503}, Counter(o for _, o in load.outcomes)
    assert find_controller() is not None


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "atoll", "cluster", *args], capture_output=True, text=True,
                          timeout=PATIENCE_S)  # fmt: skip


def test_the_cli_finds_lists_and_stops_the_cluster(ray_cluster, repository, directory):
    nodes = until(lambda: len(found := directory.nodes()) == 2 and found, "both nodes ready")
    pids = [child_pid(a.name) for a in nodes]
    up = cli("up", "--address", ray_cluster.address, "--repository", str(repository))  # finds the running one
    status = cli("status", "--address", ray_cluster.address)
    assert up.returncode == status.returncode == 0, up.stderr + status.stderr
    listed = [line.split() for line in status.stdout.splitlines()]
    assert [(n.name, n.http, n.grpc, n.metrics) for n in nodes] == [(w[0], w[2], w[4], w[6]) for w in listed]
    assert up.stdout == status.stdout
    down = cli("down", "--address", ray_cluster.address)
    assert down.returncode == 0 and "stopped" in down.stderr
    assert find_controller() is None
    until(lambda: not any(alive(pid) for pid in pids), "every node's atoll serve ends")
