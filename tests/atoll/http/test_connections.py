"""Connections that hold no whole request cannot lock real clients out (`atoll/http/connections.py`),
and bodies held back cannot exhaust a front end's memory (`bodies.BodyBudget`); the failures they
prevent are in docs/http-edge.md. Here a real `atoll serve` bounded to a few connections per
protocol meets many more idle and half-sent ones: real HTTP clients are answered and the idle ones
are closed (the idle and body timeouts set long, so only the bound explains it); past gRPC's bound
new connections are refused, and the idle ones go after the handshake timeout. Every wait is
bounded generously and none is a fixed sleep.
"""

from __future__ import annotations

import re
import socket
import time
from types import SimpleNamespace

import grpc
import pytest
from tests.atoll.probes import PATIENCE_S, metric, request, serving, until
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from atoll.bench.bodies import infer_body
from atoll.bench.corpus import jpeg_bytes
from atoll.supervisor.server_process import ServerProcess
from atoll.http.bodies import BodyBudget, BodyError
from atoll.http.connections import connection_bound, grpc_limits
from atoll.http.messages import HttpRequest
from atoll.supervisor.process_settings import METRICS_CONNECTIONS

MODEL = "mobilenet_v3_small"
BOUND = 16
BODY_MAX, BODY_BUDGET = 16 << 20, 32 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("repo"), MODEL, "--front-ends", "1", "--set", f"server.max_connections={BOUND}",
                 "--set", "server.body_timeout_s=3600", "--set", "server.idle_timeout_s=3600",
                 "--set", f"server.max_request_bytes={BODY_MAX}", "--set", f"server.body_memory_bytes={BODY_BUDGET}",
                 "--metrics-port", "0") as s:  # fmt: skip
        yield s


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (EOF or reset), without waiting."""
    sock.setblocking(False)
    try:
        return sock.recv(4096) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


def test_the_bound_follows_the_open_file_limit():
    assert connection_bound(100, 1 << 20) == 100  # set: as set
    assert connection_bound(0, 1024) == (1024 - 256) // 2  # HTTP and gRPC share what the reserve leaves
    assert connection_bound(0, 200) == 16  # never below a floor
    options = dict(grpc_limits(50, 60.0))
    assert options["grpc.max_allowed_incoming_connections"] == 50
    assert options["grpc.max_connection_idle_ms"] == 60_000


def test_idle_and_half_sent_http_connections_make_room_for_real_clients(server):
    host, port = server.url.removeprefix("http://").split(":")
    evicted = metric(server.url, "atoll_connections_evicted_total")
    idle = [socket.create_connection((host, int(port)), timeout=PATIENCE_S) for _ in range(6 * BOUND)]
    arriving = []
    for _ in range(2 * BOUND):  # whole headers, one byte of a 100 KB body: not yet a request the server holds
        sock = socket.create_connection((host, int(port)), timeout=PATIENCE_S)
        sock.sendall(f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{{".encode())
        arriving.append(sock)
    try:
        # all of them still connected from the client's side, yet real clients get in
        body, headers = infer_body("image", [jpeg_bytes(320, 240)])
        assert [request(f"{server.url}/v2/models/{MODEL}/infer", body, headers) for _ in range(5)] == [200] * 5
        assert request(f"{server.url}/v2/health/ready") == 200
        # to make room the server closed all but at most BOUND of the 8 x BOUND it was offered
        offered = idle + arriving
        until(lambda: sum(map(_closed_by_server, offered)) >= len(offered) - BOUND, "the excess closed")
        assert metric(server.url, "atoll_connections_evicted_total") - evicted >= len(offered) - BOUND
    finally:
        for sock in idle + arriving:
            sock.close()


def test_grpc_refuses_connections_past_its_bound_and_drops_those_that_never_handshake(server):
    host, port = server.grpc_address.rsplit(":", 1)
    idle = [socket.create_connection((host, int(port)), timeout=PATIENCE_S) for _ in range(BOUND + 8)]
    try:
        # the 8 past the bound at once, the rest after the handshake timeout: all of them
        until(lambda: all(map(_closed_by_server, idle)), "every idle gRPC connection closed")
    finally:
        for sock in idle:
            sock.close()
    with grpc.insecure_channel(server.grpc_address) as channel:
        ready = service_pb2_grpc.GRPCInferenceServiceStub(channel).ServerReady(pb.ServerReadyRequest(), timeout=PATIENCE_S)
    assert ready.ready


def test_idle_connections_to_the_metrics_port_make_room_for_a_scraper(server):
    url = next(m.group(1) for line in server.log if (m := re.search(r"metrics (http://\S+?)/metrics", line)))
    host, port = url.removeprefix("http://").split(":")
    idle = [socket.create_connection((host, int(port)), timeout=PATIENCE_S) for _ in range(2 * METRICS_CONNECTIONS)]
    try:
        assert request(f"{url}/metrics") == 200
        until(lambda: sum(map(_closed_by_server, idle)) >= METRICS_CONNECTIONS, "the excess closed")
    finally:
        for sock in idle:
            sock.close()


def test_bodies_held_back_cannot_exhaust_memory_or_keep_requests_out(server):
    host, port = server.url.removeprefix("http://").split(":")
    size = BODY_MAX // 2
    held = []
    for _ in range(8):  # 64 MB of bodies against a 32 MB budget, each held back before its last byte
        sock = socket.create_connection((host, int(port)), timeout=PATIENCE_S)
        sock.sendall(f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode())
        try:
            sock.sendall(bytes(size - 1))
        except ConnectionError:  # cut off while still sending
            pass
        held.append(sock)
    try:
        body, headers = infer_body("image", [jpeg_bytes(320, 240)])
        assert [request(f"{server.url}/v2/models/{MODEL}/infer", body, headers) for _ in range(3)] == [200] * 3
        # the largest bodies still arriving were cut off: at most BUDGET / size of them can stay
        until(lambda: sum(map(_closed_by_server, held)) >= len(held) - BODY_BUDGET // size, "bodies cut off")
    finally:
        for sock in held:
            sock.close()


def test_the_body_budget_cuts_off_the_largest_body_still_arriving():
    def request() -> HttpRequest:
        connection = SimpleNamespace(closed=False)
        connection.abort = lambda: setattr(connection, "closed", True)
        return HttpRequest("POST", "/v2/models/m/infer", "", {}, connection)

    budget = BodyBudget(100)
    first, second, third, fourth = request(), request(), request(), request()
    budget.take(first, 60)
    budget.take(second, 30)
    budget.take(third, 20)  # 110 > 100: the largest still arriving goes
    assert (first.connection.closed, second.connection.closed, budget.used) == (True, False, 50)
    budget.arrived(third)  # whole: no longer a candidate
    with pytest.raises(BodyError) as refused:  # now the largest would be this one itself
        budget.take(fourth, 80)
    assert refused.value.code.http == 503 and refused.value.retry_after_s == 1
    assert (second.connection.closed, budget.used) == (False, 50)
    budget.release(second)  # answered: its share is given back
    assert budget.used == 20


def test_what_a_whole_body_will_decode_to_is_reserved_without_cutting_anyone_off():
    budget = BodyBudget(100)
    arriving, whole, alone = (SimpleNamespace(held=0, connection=SimpleNamespace(abort=None)) for _ in range(3))
    budget.take(arriving, 40)
    budget.take(whole, 30)
    budget.arrived(whole)
    budget.reserve(whole, 30)  # its tensors: 100 held, nothing cut off
    assert (budget.used, whole.held) == (100, 60)
    with pytest.raises(BodyError) as refused:
        budget.reserve(whole, 1)
    assert refused.value.code.http == 503 and budget.used == 100
    budget.release(arriving)
    budget.release(whole)
    budget.reserve(alone, 500)  # alone, one request always fits
    assert budget.used == 500


def test_a_connection_that_sends_nothing_is_closed_after_the_idle_timeout(tmp_path):
    with ServerProcess(["--repository", str(tmp_path), "--front-ends", "1", "--grpc-port", "-1",
                        "--set", "server.idle_timeout_s=1"]) as s:  # fmt: skip
        host, port = s.url.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)), timeout=PATIENCE_S)
        opened = time.monotonic()
        try:
            until(lambda: _closed_by_server(sock), "the idle connection closed")
        finally:
            sock.close()
        assert time.monotonic() - opened >= 1.0
        assert request(f"{s.url}/v2/health/live") == 200
