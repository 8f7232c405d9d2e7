"""The endpoint's native relay (`cluster/relay.py`, `native/relay.c`) over stand-in nodes (Atoll's HTTP
edge answering as the test says): infer requests relayed whole in both directions with one hop's
headers dropped, pipelined and kept-alive requests, first tries chosen in C from the counts every path
shares, a refusing node passed over and a gone one marked,
the request timeout, and what the relay hands to the endpoint's Python edge (other routes, encoded
or chunked bodies, a restricted call without its header, a stalled body, odd and hostile heads),
answered as before. The Python path (`server.endpoint_relay=python`) answers the same requests the
same way."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import os
import socket
import struct
import threading
import time

import pytest

from atoll.bench.bodies import http_body
from atoll.cluster import endpoint as endpoint_module
from atoll.cluster.directory import NodeAddress, StaticDirectory
from atoll.cluster.relay import native_module
from atoll.http import local_socket
from atoll.http.bodies import BodyLimits
from atoll.http.connections import HttpConnections
from atoll.http.edge import HttpServer
from atoll.http.messages import HttpResponse, Routes
from gpu_runtime.native import NativeBuildError
from tests.atoll.cluster.test_endpoint import Running
from tests.atoll.probes import http_answers, until

ANSWER_HEADER = json.dumps({"model_name": "m", "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 4],
                                                            "parameters": {"binary_data_size": 16}}]}).encode()
ANSWER_BODY = ANSWER_HEADER + bytes(range(16))


class StandIn:
    """A node on a loop of its own: ready, model "m" in its index, infer answered as `mode` says
    ("ok", "refuse": 503, "hang": never), each infer request's headers and body kept, and the
    family of the socket it came on; with `local`, on a local socket too (`local_socket`)."""

    def __init__(self, local: bool = False):
        self.mode = "ok"
        self.seen: list[tuple[dict, bytes]] = []
        self.families: list[socket.AddressFamily] = []
        self.local = ""
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.port = asyncio.run_coroutine_threadsafe(self._start(local), self.loop).result(30)
        self.address = NodeAddress(f"n{self.port}", f"127.0.0.1:{self.port}", "", "", self.local)

    async def _start(self, local: bool) -> int:
        routes = Routes()

        async def ready(request):
            return HttpResponse(200)

        async def index(request):
            return HttpResponse.json([{"name": "m", "version": "1", "state": "READY"}])

        async def infer(request):
            self.seen.append((dict(request.headers), bytes(request.body)))
            self.families.append(request.connection.transport.get_extra_info("socket").family)
            if self.mode == "refuse":
                return HttpResponse.json({"error": "full"}, 503, {"Retry-After": "1"})
            if self.mode == "hang":
                await asyncio.sleep(3600)
            return HttpResponse(200, ANSWER_BODY, "application/octet-stream",
                                {"Inference-Header-Content-Length": str(len(ANSWER_HEADER))})  # fmt: skip

        routes.add("GET", "/v2/health/ready", ready)
        routes.add("POST", "/v2/repository/index", index)
        routes.add("POST", "/v2/models/{model}/infer", infer)
        routes.add("POST", "/v2/models/{model}/versions/{version}/infer", infer)
        self.server = HttpServer(routes, BodyLimits(64 << 20, 30.0), HttpConnections(1024))
        listener = await self.server.listen("127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        if local:
            sock, self.local = local_socket.listen(f"atoll-test-{os.getpid()}-{port}", 16)
            await self.server.listen_on(sock)
        return port

    def stop(self) -> None:
        """Close the port and every connection (a node gone), then the loop."""
        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(self.server.shutdown(0), self.loop).result(30)
            self.loop.call_soon_threadsafe(self.loop.stop)


def _native_or_skip() -> None:
    try:
        native_module()
    except NativeBuildError as exc:  # no C compiler or Python headers here: the endpoint serves in Python
        pytest.skip(f"the native relay cannot be built here: {exc}")


@pytest.fixture(params=["native", "python"])
def relay_kind(request):
    return request.param


@pytest.fixture
def nodes(request):
    """Two stand-ins, reached over TCP (or, parametrized "local", through their local sockets)."""
    made = [StandIn(getattr(request, "param", "tcp") == "local") for _ in range(2)]
    yield made
    for node in made:
        node.stop()


def _endpoint(nodes, relay="native", **settings) -> Running:
    if relay == "native":
        _native_or_skip()
    running = Running(StaticDirectory([n.address for n in nodes]), **{"server.endpoint_relay": relay, **settings})
    until(lambda: running.endpoint.view.candidates("m"), "the stand-ins' model in the routing")
    return running


def _port(running: Running) -> int:
    return int(running.endpoint.http_url.rsplit(":", 1)[1])


def _infer(extra: dict | None = None, priority: int = 0, size: int = 300_000) -> bytes:
    body, headers = http_body("x", "UINT8", [size], bytes(i % 251 for i in range(size)), priority)
    head = "".join(f"{k}: {v}\r\n" for k, v in {**headers, **(extra or {})}.items())
    return f"POST /v2/models/m/infer HTTP/1.1\r\nHost: e\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


def _ask(running: Running, raw: bytes, count: int = 1) -> list[tuple[int, dict, bytes]]:
    with socket.create_connection(("127.0.0.1", _port(running)), timeout=60) as sock:
        sock.sendall(raw)
        return http_answers(sock, count)


@pytest.mark.parametrize("size", [300_000, 1_000])  # the binary part through pipes, or in memory
def test_infer_requests_are_relayed_whole_both_ways_and_one_hops_headers_stay(nodes, relay_kind, size):
    running = _endpoint(nodes, relay_kind)
    try:
        raw = _infer({"X-Trace": "t1", "Keep-Alive": "timeout=5"}, size=size)
        answers = _ask(running, raw * 3, 3)  # pipelined on one connection
    finally:
        running.stop()
    sent_body = raw[raw.index(b"\r\n\r\n") + 4:]
    assert [(s, b) for s, _, b in answers] == [(200, ANSWER_BODY)] * 3
    assert all(h["inference-header-content-length"] == str(len(ANSWER_HEADER)) for _, h, _ in answers)
    assert all(h["content-type"] == "application/octet-stream" for _, h, _ in answers)
    seen = [s for n in nodes for s in n.seen]
    assert len(seen) == 3 and all(body == sent_body for _, body in seen)
    assert all(h["x-trace"] == "t1" and "keep-alive" not in h for h, _ in seen)
    assert {n.address.name for n in nodes if n.seen} == {n.address.name for n in nodes}  # both get work


@pytest.mark.parametrize("size", [300_000, 20_000])  # the binary part through pipes, or in memory
def test_a_body_that_comes_in_parts_is_relayed_whole(nodes, size):
    running = _endpoint(nodes)
    raw = _infer(size=size)
    head = raw.index(b"\r\n\r\n") + 4
    cuts = [0, head, head + 100, head + size // 2, len(raw)]  # the head alone, then the body in three parts
    try:
        with socket.create_connection(("127.0.0.1", _port(running)), timeout=60) as sock:
            for a, b in zip(cuts, cuts[1:]):
                sock.sendall(raw[a:b])
                time.sleep(0.05)  # (not a wait for the server: each part goes on its own)
            status, _, body = http_answers(sock)[0]
    finally:
        running.stop()
    assert (status, body) == (200, ANSWER_BODY)
    assert [b for n in nodes for _, b in n.seen] == [raw[head:]]


def test_a_node_on_this_host_is_reached_through_its_local_socket_one_elsewhere_over_tcp(relay_kind):
    here, elsewhere = StandIn(local=True), StandIn(local=True)
    boot, _, rest = elsewhere.local.partition(":")
    elsewhere.address = dataclasses.replace(elsewhere.address, local=f"{boot}:1{rest[rest.index('/'):]}")  # (netns)
    running = _endpoint([here, elsewhere], relay_kind)
    try:
        answers = _ask(running, _infer(size=300_000) * 4 + _infer(size=1_000) * 2, 6)
    finally:
        running.stop()
        here.stop()
        elsewhere.stop()
    assert [(s, b) for s, _, b in answers] == [(200, ANSWER_BODY)] * 6
    assert here.families and set(here.families) == {socket.AF_UNIX}
    assert elsewhere.families and set(elsewhere.families) == {socket.AF_INET}
    assert len(here.seen[0][1]) > 300_000 and here.seen[0][0]["host"]  # whole, with a Host header


def test_first_tries_are_chosen_in_c_from_the_counts_every_path_shares(nodes):
    running = _endpoint(nodes)
    view = running.endpoint.view
    busy, idle = (n.address.name for n in nodes)

    def out() -> dict[str, int]:
        return {name: o.total for name, o in view.router.outstanding().items()}

    try:
        for _ in range(5):
            view.router.sent(busy, False)  # five requests out to one node on another path (the loop's gRPC)
        around_busy = [a[0] for a in _ask(running, _infer(size=1_000) * 4, 4)]
        for _ in range(5):
            view.router.answered(busy, False)
        in_turn = [a[0] for a in _ask(running, _infer(size=1_000) * 4, 4)]
        relayed = view.router.counts.relayed()
        by_python = _ask(running, _infer(priority=2, size=1_000))[0][0]  # names "priority": routed in Python
        relayed_after = view.router.counts.relayed()
        view.metrics.sync()
        forwarded = {name: view.metrics.forwarded_to(name)._value.get() for name in (busy, idle)}
        # (Python settles a count once the client has the answer, which it may read first)
        until(lambda: out() == {busy: 0, idle: 0}, "every count settled")
    finally:
        running.stop()
    assert around_busy == in_turn == [200] * 4 and by_python == 200
    assert [len(n.seen) for n in nodes] == [2, 7] or [len(n.seen) for n in nodes] == [3, 6]
    assert relayed == {busy: 2, idle: 6} and relayed_after == relayed  # the one naming "priority": Python's
    assert sum(forwarded.values()) == 9 and forwarded[busy] >= 2  # the metric counts both paths


def test_the_routing_table_refuses_what_it_cannot_hold():
    _native_or_skip()
    routing = native_module().Routing()
    routing.publish([("m", "", [("a", "127.0.0.1:1")]), ("m", "2", [("a", "127.0.0.1:1"), ("b", "@atoll-x")])])
    with pytest.raises(ValueError, match="too long"):
        routing.publish([("m", "", [("a", "h" * 300)])])
    with pytest.raises(TypeError):
        routing.publish([("m", "")])
    routing.sent("a", True)
    routing.sent("b", False)
    routing.answered("a", True)
    assert routing.of("b") == (1, 0) and routing.of("nowhere") == (0, 0)
    assert routing.snapshot() == {"a": (0, 0), "b": (1, 0)} and routing.relayed() == {}


def test_the_relay_counts_what_it_relayed_and_what_it_handed_on(nodes):
    running = _endpoint(nodes)
    try:
        _ask(running, _infer() * 2, 2)
        status = _ask(running, b"GET /v2/health/ready HTTP/1.1\r\nHost: e\r\n\r\n")[0][0]
        # (a request counts once its thread is done with it, which may be after the client has the answer)
        counts = until(lambda: (c := running.endpoint._relay.counts())["held"] == 0 and c, "the bodies let go")
    finally:
        running.stop()
    assert status == 200
    assert (counts["requests"], counts["handed"], counts["held"]) == (2, 1, 0)


def _congestion(sock: socket.socket) -> str:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()


def _controls_towards(ports: set[int]) -> list[str]:
    """The congestion control of each of this process's TCP connections to one of `ports`."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            sock = socket.socket(fileno=os.dup(int(name)))
        except OSError:  # not a socket (or gone meanwhile)
            continue
        with sock:
            try:
                if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.getpeername()[1] in ports:
                    found.append(_congestion(sock))
            except OSError:  # not connected, or not TCP
                continue
    return found


def test_the_node_connections_take_the_first_congestion_control_the_kernel_allows(nodes):
    with socket.socket() as fresh:
        default = _congestion(fresh)
    allowed = open("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read().split()
    if os.geteuid() == 0:
        allowed += open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    other = next((name for name in allowed if name != default), None)
    if other is None:
        pytest.skip(f"this kernel lets this process choose no congestion control but {default}")
    running = _endpoint(nodes, **{"server.endpoint_node_congestion": ["no-such-control", other]})
    try:
        before = _controls_towards({n.port for n in nodes})  # the endpoint's own calls (index, health)
        _ask(running, _infer() * 4, 4)
        after = _controls_towards({n.port for n in nodes})
    finally:
        running.stop()
    assert other not in before and after.count(other) >= 1  # the relay's, kept alive for the next request


def _reset(sock: socket.socket) -> None:
    """Close `sock` with a reset, as a client killed mid-request does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_a_version_and_a_priority_are_read_and_a_reset_client_gives_its_request_up(nodes, relay_kind):
    running = _endpoint(nodes, relay_kind)
    router = running.endpoint.view.router

    def out(kind: str) -> int:
        return sum(getattr(o, kind) for o in router.outstanding().values())

    try:
        versioned = _infer().replace(b"/v2/models/m/infer", b"/v2/models/m/versions/1/infer", 1)
        statuses = [a[0] for a in _ask(running, versioned + versioned.replace(b"/versions/1/", b"/versions/2/"), 2)]
        for node in nodes:
            node.mode = "hang"
        sock = socket.create_connection(("127.0.0.1", _port(running)), timeout=60)
        sock.sendall(_infer(priority=1))
        until(lambda: out("real_time") == 1, "a real-time request out")
        _reset(sock)
        until(lambda: out("total") == 0, "the reset client's request given up")
        sock = socket.create_connection(("127.0.0.1", _port(running)), timeout=60)
        sock.sendall(_infer())  # best-effort, naming no priority: the relay's own first try
        until(lambda: out("total") == 1, "a best-effort request out")
        _reset(sock)
        until(lambda: out("total") == 0, "the reset client's best-effort request given up")
        sock = socket.create_connection(("127.0.0.1", _port(running)), timeout=60)
        sock.sendall(_infer(priority=2))
        until(lambda: out("total") == 1, "a best-effort request out")
        real_time = out("real_time")
        started = time.monotonic()
    finally:
        running.stop()  # a request still in hand: given up after drain_s (1 s)
    stopped_in = time.monotonic() - started
    answer = sock.recv(1 << 16)
    sock.close()
    assert statuses == [200, 503]  # version 2 is READY on no node (its model is: not 404)
    assert real_time == 0 and out("total") == 0
    assert stopped_in < 30 and not answer.startswith(b"HTTP/1.1 200")


def test_connections_past_the_relays_bound_are_the_edges(nodes):
    running = _endpoint(nodes, **{"server.max_connections": 2})
    try:
        held = [socket.create_connection(("127.0.0.1", _port(running)), timeout=60) for _ in range(2)]
        until(lambda: running.endpoint._relay.counts()["live"] == 2, "two connections on the relay")
        third = _ask(running, _infer())[0]
        counts = running.endpoint._relay.counts()
        for sock in held:
            sock.close()
    finally:
        running.stop()
    assert third[0] == 200 and counts["handed"] == 1 and counts["requests"] == 0


def test_encoded_chunked_and_restricted_requests_are_answered_by_the_edge(nodes):
    running = _endpoint(nodes, **{"server.http_restricted_api": ["inference:key=secret"]})
    try:
        refused = _ask(running, _infer())[0]
        allowed = _ask(running, _infer({"key": "secret"}))[0]
        raw = _infer({"key": "secret"})
        head, body = raw.split(b"\r\n\r\n", 1)
        packed = gzip.compress(body)
        head = head.replace(f"Content-Length: {len(body)}".encode(), f"Content-Length: {len(packed)}".encode())
        encoded = _ask(running, head + b"\r\nContent-Encoding: gzip\r\n\r\n" + packed)[0]
        chunked_head = head.replace(f"Content-Length: {len(packed)}".encode(), b"Transfer-Encoding: chunked")
        chunked = _ask(running, chunked_head + b"\r\n\r\n" + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")[0]
        counts = until(lambda: (c := running.endpoint._relay.counts())["requests"] and c, "the relayed one counted")
    finally:
        running.stop()
    assert refused[0] == 403 and "restricted" in json.loads(refused[2])["error"]
    assert [allowed[0], encoded[0], chunked[0]] == [200, 200, 200]
    assert [s[1] for n in nodes for s in n.seen] == [body] * 3  # the edge undid the encoding and the chunks
    assert counts["handed"] == 3 and counts["requests"] == 1


@pytest.mark.parametrize("nodes", ["tcp", "local"], indirect=True)
def test_a_refusing_node_is_passed_over_and_a_gone_one_taken_out(nodes, relay_kind):
    running = _endpoint(nodes, relay_kind)
    try:
        nodes[0].mode = "refuse"
        assert all(a[0] == 200 for a in _ask(running, _infer() * 4, 4))
        nodes[1].mode = "refuse"
        last = _ask(running, _infer())[0]  # every node refuses: the last refusal, as the node gave it
        nodes[0].stop()
        nodes[1].stop()
        gone = _ask(running, _infer())[0]
        out_of_routing = running.endpoint.view.candidates("m") + running.endpoint.view.routes()
        retries = running.endpoint.view.metrics.retries._value.get()
    finally:
        running.stop()
    assert (last[0], json.loads(last[2]), last[1]["retry-after"]) == (503, {"error": "full"}, "1")
    assert gone[0] == 503 and "no node of the cluster could answer for model 'm'" in json.loads(gone[2])["error"]
    assert out_of_routing == [] and retries >= 2
    assert sum(1 for n in nodes for _ in n.seen) >= 6
    assert {f for n in nodes for f in n.families} == {socket.AF_UNIX if nodes[0].local else socket.AF_INET}


@pytest.mark.parametrize("nodes", ["tcp", "local"], indirect=True)
def test_a_node_that_does_not_answer_is_a_timeout(nodes, relay_kind, monkeypatch):
    monkeypatch.setattr(endpoint_module, "FORWARD_MARGIN_S", 0.0)
    running = _endpoint(nodes, relay_kind, **{"server.request_timeout_s": 0.5})
    try:
        for node in nodes:
            node.mode = "hang"
        status, _, body = _ask(running, _infer())[0]
        outstanding = {name: o.total for name, o in running.endpoint.view.router.outstanding().items()}
    finally:
        running.stop()
    assert (status, json.loads(body)) == (504, {"error": "the node did not answer within 0.5 s"})
    assert set(outstanding.values()) == {0}


def test_a_body_that_stalls_is_answered_by_the_edges_own_timeout(nodes):
    running = _endpoint(nodes, **{"server.body_timeout_s": 0.3})
    try:
        raw = _infer()
        with socket.create_connection(("127.0.0.1", _port(running)), timeout=60) as sock:
            sock.sendall(raw[:len(raw) // 2])
            status, _, body = http_answers(sock)[0]
        counts = running.endpoint._relay.counts()
    finally:
        running.stop()
    assert status == 408 and counts["handed"] == 1 and counts["held"] == 0


def test_stop_closes_idle_connections_and_accepts_no_more(nodes):
    running = _endpoint(nodes)
    port = _port(running)
    idle = socket.create_connection(("127.0.0.1", port), timeout=60)
    assert _answers_after(idle, _infer())[0][0] == 200
    started = time.monotonic()
    running.stop()
    assert idle.recv(1) == b"" and time.monotonic() - started < 30
    idle.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=5).recv(1)


def _answers_after(sock: socket.socket, raw: bytes) -> list[tuple[int, dict, bytes]]:
    sock.sendall(raw)
    return http_answers(sock)


HOSTILE = {
    "too large": b"POST /v2/models/m/infer HTTP/1.1\r\nHost: e\r\nContent-Length: 99999999999\r\n\r\n",
    "two lengths": b"POST /v2/models/m/infer HTTP/1.1\r\nHost: e\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    "bad length": b"POST /v2/models/m/infer HTTP/1.1\r\nHost: e\r\nContent-Length: -2\r\n\r\n{}",
    "folded header": b"POST /v2/models/m/infer HTTP/1.1\r\nHost: e\r\nX-A: 1\r\n  2\r\nContent-Length: 2\r\n\r\n{}",
    "many headers": b"POST /v2/models/m/infer HTTP/1.1\r\n" + b"X-A: 1\r\n" * 200 + b"Content-Length: 2\r\n\r\n{}",
    "encoded name": b"POST /v2/models/%6D/infer HTTP/1.1\r\nHost: e\r\nContent-Length: 2\r\n\r\n{}",
    "HTTP/1.0": b"POST /v2/models/m/infer HTTP/1.0\r\nHost: e\r\nContent-Length: 2\r\n\r\n{}",
    "no length": b"POST /v2/models/m/infer HTTP/1.1\r\nHost: e\r\n\r\n",
}


def test_odd_and_hostile_heads_are_answered_as_the_edge_answers_them(nodes):
    answered = {}
    for kind in ("native", "python"):
        running = _endpoint(nodes, kind, **{"server.max_request_bytes": 1 << 20})
        try:
            for name, raw in HOSTILE.items():
                with socket.create_connection(("127.0.0.1", _port(running)), timeout=60) as sock:
                    sock.sendall(raw)
                    head = b""
                    while b"\r\n" not in head and (chunk := sock.recv(1 << 16)):
                        head += chunk
                answered[kind, name] = head.split(b"\r\n", 1)[0]
        finally:
            running.stop()
    assert all(answered["native", name] == answered["python", name] for name in HOSTILE), answered
    assert answered["native", "too large"].startswith(b"HTTP/1.1 413")
