"""`atoll serve` against slow clients and dead children (issue #13), end to end.

Slow clients: connections that send headers and a byte of a large body once made every infer
answer 503 for as long as they stayed open, while readiness said 200. Dead children: a SIGKILLed
child used to break the server for good (or after its fifth restart), unlogged and uncounted. Here
every child kind `atoll serve` has (front-end processes and vGPU workers; preprocessing runs in the
front ends' threads) is killed under load: every request gets exactly one answer, service comes
back, and the restart is logged at WARNING and counted. Nothing waits on a fixed sleep: each step
waits (with a generous bound) for the condition it needs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import shared_memory

import pytest
from tests.atoll.probes import PATIENCE_S, ClosedLoop, metric, request, serving, until

from atoll.bench.bodies import infer_body
from atoll.bench.corpus import jpeg_bytes

MODEL = "mobilenet_v3_small"
BODY_TIMEOUT_S = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("repo"), MODEL, "--front-ends", "2",
                 "--set", f"server.body_timeout_s={BODY_TIMEOUT_S}") as s:  # fmt: skip
        yield s


def test_slow_bodies_hold_only_their_own_connections(server):
    infer = f"{server.url}/v2/models/{MODEL}/infer"
    host, port = server.url.removeprefix("http://").split(":")
    slow = []
    for _ in range(100):  # headers and one byte of a 100 KB body, then nothing
        sock = socket.create_connection((host, int(port)), timeout=PATIENCE_S)
        sock.sendall(f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{{".encode())
        slow.append(sock)
    try:
        body, headers = infer_body("image", [jpeg_bytes(320, 240)])
        assert [request(infer, body, headers) for _ in range(10)] == [200] * 10
        assert request(f"{server.url}/v2/health/ready") == 200
        answers = [sock.recv(4096).decode(errors="replace") for sock in slow]
    finally:
        for sock in slow:
            sock.close()
    assert all(a.startswith("HTTP/1.1 408") and f"within {BODY_TIMEOUT_S} s" in a for a in answers)


@pytest.mark.parametrize("kind", ["vgpu", "front_end"])
def test_a_sigkilled_child_under_load_is_replaced_and_every_request_answered_once(server, kind):
    infer = f"{server.url}/v2/models/{MODEL}/infer"
    # best-effort rows run in the front ends (front_end/colocated.py): the vGPU's load is real-time
    body, headers = infer_body("image", [jpeg_bytes(320, 240, seed=9)], priority=1 if kind == "vgpu" else 0)
    restarts = f'atoll_worker_restarts_total{{kind="{kind}"}}'
    before = metric(server.url, restarts)
    with ClosedLoop(infer, body, headers, 4) as load:
        until(lambda: load.count(200) >= 8, "requests succeed before the kill")
        victims = server.children()[kind]
        victim = min(victims)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        # service is back: several successes answered after the kill, and the death is counted
        until(lambda: load.count(200, after=killed_at) >= 8, "requests succeed again")
        until(lambda: metric(server.url, restarts) == before + 1, f"{restarts} counts the restart")
        until(lambda: (now := server.children()[kind]) and len(now) == len(victims) and victim not in now,
              "its successor runs")
    assert len(load.outcomes) == load.sent  # every request sent got exactly one answer
    kinds = Counter(o for _, o in load.outcomes)
    assert not [o for o in kinds if isinstance(o, int) and 400 <= o < 500], kinds  # never the client's fault
    until(lambda: request(f"{server.url}/v2/health/ready") == 200, "readiness")
    died = "vGPU cpu" if kind == "vgpu" else "front end"
    assert any(died in line and f"(pid {victim}) died" in line and "SIGKILL" in line for line in server.log)


def test_a_shared_memory_object_shrunk_by_its_client_kills_no_front_end(server):
    """A client that shrinks its object after registering it: the next read of the mapping past the
    new end was a SIGBUS that killed the front end, and each successor, mapping the registered
    regions as it starts, died again. Now the read is refused, and a successor leaves it out."""

    meta = json.loads(urllib.request.urlopen(f"{server.url}/v2/models/{MODEL}", timeout=PATIENCE_S).read())
    tensor = meta["inputs"][-1]
    nbytes = 4 * 3 * 224 * 224
    segment = shared_memory.SharedMemory(create=True, size=nbytes)
    try:
        register = {"key": "/" + segment.name, "offset": 0, "byte_size": nbytes}
        assert request(f"{server.url}/v2/systemsharedmemory/region/shrunk/register",
                       json.dumps(register).encode()) == 200  # fmt: skip
        infer = json.dumps({"inputs": [{"name": tensor["name"], "datatype": "FP32", "shape": [1, 3, 224, 224],
                                        "parameters": {"shared_memory_region": "shrunk",
                                                       "shared_memory_byte_size": nbytes}}]}).encode()  # fmt: skip
        url = f"{server.url}/v2/models/{MODEL}/infer"
        assert request(url, infer) == 200
        os.ftruncate(segment._fd, 4096)
        fronts = server.children()["front_end"]
        assert [request(url, infer) for _ in range(4)] == [400] * 4  # either front end may answer
        assert server.children()["front_end"] == fronts
        victim = min(fronts)
        os.kill(victim, signal.SIGKILL)
        until(lambda: (now := server.children()["front_end"]) and len(now) == len(fronts) and victim not in now,
              "its successor runs")  # fmt: skip
        until(lambda: any("shared memory region 'shrunk' left out" in line for line in server.log),
              "the successor leaves the region out, and says so")  # fmt: skip
        until(lambda: request(f"{server.url}/v2/health/ready") == 200, "readiness")
        body, headers = infer_body("image", [jpeg_bytes(320, 240)])
        assert [request(url, body, headers) for _ in range(4)] == [200] * 4
    finally:
        request(f"{server.url}/v2/systemsharedmemory/region/shrunk/unregister", b"{}")
        segment.close()
        segment.unlink()


def test_readiness_is_false_while_a_stopped_vgpu_worker_holds_batches(server):
    """A vGPU worker stopped (SIGSTOP: hung in a driver, starved) left readiness at 200 while every
    infer timed out. Once it holds batches and says nothing for a while, the server and the model
    are not ready; when it goes on, they are again, and what it held is answered."""
    infer = f"{server.url}/v2/models/{MODEL}/infer"
    # real-time: best-effort rows of this model run in the front ends (front_end/colocated.py)
    body, headers = infer_body("image", [jpeg_bytes(320, 240, seed=5)], priority=1)
    victim = min(server.children()["vgpu"])
    os.kill(victim, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(2) as clients:
            held = [clients.submit(request, infer, body, headers) for _ in range(2)]
            until(lambda: request(f"{server.url}/v2/health/ready") == 503, "readiness says not ready")
            assert request(f"{server.url}/v2/models/{MODEL}/ready") == 400  # Triton answers a model not ready so
            assert any("no word for" in line for line in server.log)
            os.kill(victim, signal.SIGCONT)
            until(lambda: request(f"{server.url}/v2/health/ready") == 200, "readiness is back")
            assert [f.result() for f in held] == [200, 200]
    finally:
        os.kill(victim, signal.SIGCONT)
    assert victim in server.children()["vgpu"]  # stalled, never killed
