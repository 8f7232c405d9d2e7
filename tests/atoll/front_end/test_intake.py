"""A front end's native intake (`front_end/intake.py`, `native/intake.c`) in front of its HTTP edge:
infer requests read and answered by C threads give the answers the edge gives (binary and JSON
bodies, versions, pipelined and kept-alive requests, errors, Connection: close, a half-closed
client); what the intake does not take (other routes, encoded or chunked bodies, Expect, bodies
too large, a restricted call without its header, a stalled body) the edge answers as before; a
reset client cancels its request; a stop answers what is in hand and closes the rest."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import os
import socket
import struct
import time

import numpy as np
import pytest
from gpu_runtime.priority import Priority
from tests.atoll.front_end.test_server_errors import SPEC, EchoFrontEnd, StuckFrontEnd, _serving
from tests.atoll.http_served import http_served
from tests.atoll.probes import http_answers, until

from atoll.front_end.intake import native_module
from atoll.http import local_socket
from atoll.http.bodies import BodyBudget
from atoll.kserve.restricted import Restrictions
from atoll.repository.specs import TensorSpec
from gpu_runtime.native import NativeBuildError

X = np.array([[1.5, -2.0]], np.float32)
HEADER = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2],
                                 "parameters": {"binary_data_size": X.nbytes}}],
                     "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}).encode()  # fmt: skip
JSON_BODY = json.dumps({"id": "j1", "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [3, 4]}]})


@pytest.fixture(autouse=True)
def _native():
    try:
        native_module()
    except NativeBuildError as exc:  # no C compiler or Python headers here: the front end serves in Python
        pytest.skip(f"the native intake cannot be built here: {exc}")


def _request(body: bytes, path: str = "/v2/models/m/infer", headers: dict | None = None) -> bytes:
    head = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    return f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


BINARY = _request(HEADER + X.tobytes(), headers={"Inference-Header-Content-Length": len(HEADER)})
JSON = _request(JSON_BODY.encode())
VERSIONED = _request(JSON_BODY.encode(), "/v2/models/m/versions/1/infer")


async def _ask(served, raw: bytes, count: int = 1, half_close: bool = False) -> list[tuple[int, dict, bytes]]:
    """Send `raw` on a new connection and read `count` answers (off the loop: the server runs on it)."""

    def go():
        with socket.create_connection((served.host, served.port), timeout=30) as sock:
            sock.sendall(raw)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
            return http_answers(sock, count)

    return await asyncio.to_thread(go)


async def _settled(served) -> dict | None:
    """The intake's counts once no connection is left (its threads count after they write)."""
    if served.intake is None:
        return None
    await asyncio.to_thread(until, lambda: served.intake.counts()["live"] == 0, "the connections closed")
    return served.intake.counts()


def _both(scenario, **kw) -> tuple:
    """`scenario(served)` against the edge alone and through the intake."""

    async def go(intake: bool):
        async with http_served(_serving(EchoFrontEnd()), intake=intake, **kw) as served:
            return await scenario(served)

    return asyncio.run(go(False)), asyncio.run(go(True))


def test_infer_requests_get_the_edges_answers_pipelined_on_one_kept_connection():
    async def scenario(served):
        answers = await _ask(served, BINARY + JSON + VERSIONED + _request(b"{", "/v2/models/nope/infer"), 4)
        return answers, await _settled(served)

    (edge, _), (native, counts) = _both(scenario)
    assert [(s, b) for s, _, b in native] == [(s, b) for s, _, b in edge]
    assert [s for s, _, _ in native] == [200, 200, 200, 404]
    assert native[0][2].endswith(X.tobytes())  # the binary output, as sent
    assert json.loads(native[1][2])["outputs"][0]["data"] == [3, 4] and json.loads(native[1][2])["id"] == "j1"
    assert all("connection" not in h for _, h, _ in native)
    assert (counts["requests"], counts["handed"], counts["held"]) == (4, 0, 0)


def test_connection_close_and_a_half_closed_client_get_their_answer_then_the_connection_closes():
    async def scenario(served):
        closing = await asyncio.to_thread(_closed_after, served, _request(JSON_BODY.encode(), headers={"Connection": "close"}))
        half = await _ask(served, JSON, 1, half_close=True)
        return closing, half[0][0]

    edge, native = _both(scenario)
    assert native == edge == ((200, True), 200)


def test_a_body_that_comes_in_parts_is_taken_whole():
    def parts(served):
        head = BINARY.index(b"\r\n\r\n") + 4
        cuts = [0, head, head + 10, len(BINARY)]  # the head alone, then the body in two parts
        with socket.create_connection((served.host, served.port), timeout=30) as sock:
            for a, b in zip(cuts, cuts[1:]):
                sock.sendall(BINARY[a:b])
                time.sleep(0.05)  # (not a wait for the server: each part goes on its own)
            return http_answers(sock, 1)

    async def scenario(served):
        return await asyncio.to_thread(parts, served), await _settled(served)

    (edge, _), (native, counts) = _both(scenario)
    assert [(s, b) for s, _, b in native] == [(s, b) for s, _, b in edge]
    assert native[0][0] == 200 and native[0][2].endswith(X.tobytes())
    assert (counts["requests"], counts["handed"]) == (1, 0)


def _closed_after(served, raw: bytes) -> tuple[int, bool]:
    with socket.create_connection((served.host, served.port), timeout=30) as sock:
        sock.sendall(raw)
        [(status, headers, _)] = http_answers(sock, 1)
        return status, headers.get("connection") == "close" and sock.recv(1) == b""


def test_what_the_intake_does_not_take_the_edge_answers_as_before():
    zipped = gzip.compress(JSON_BODY.encode())
    chunked = (b"POST /v2/models/m/infer HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
               + f"{len(JSON_BODY):x}\r\n".encode() + JSON_BODY.encode() + b"\r\n0\r\n\r\n")  # fmt: skip
    raws = [b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n",
            _request(zipped, headers={"Content-Encoding": "gzip"}), chunked,
            _request(JSON_BODY.encode(), headers={"Expect": "100-continue"}),
            _request(b"x" * 5000),  # past max_bytes
            _request(b"{}", "/v2/models/m%31/infer")]  # fmt: skip

    async def scenario(served):
        out = [(await _ask(served, raw))[0] for raw in raws]
        return [(status, body) for status, _, body in out], await _settled(served)

    (edge, _), (native, counts) = _both(scenario, max_bytes=4096)
    assert native == edge
    assert [status for status, _ in native] == [200, 200, 200, 200, 413, 404]
    assert counts["handed"] == len(raws) and counts["requests"] == 0


def test_a_body_that_stalls_goes_to_the_edge_which_answers_its_timeout():
    async def scenario(served):
        return (await _ask(served, JSON[:-5]))[0][0]

    assert _both(scenario, body_timeout_s=0.3) == (408, 408)


def test_bodies_share_the_edges_budget_leaving_one_largest_request_to_the_edge():
    budget = BodyBudget(len(JSON) + 4096)  # the intake may hold what leaves max_bytes (4096) to the edge

    async def scenario(served):
        statuses = [(await _ask(served, raw))[0][0] for raw in (JSON, _request(b"x" * 4000))]
        return statuses, (await _settled(served) or {}).get("handed"), budget.used

    assert _both(scenario, max_bytes=4096, budget=budget) == (([200, 400], None, 0), ([200, 400], 1, 0))


def test_the_edge_counts_what_the_intake_holds():
    budget = BodyBudget(8192)

    async def go():
        async with http_served(_serving(EchoFrontEnd()), max_bytes=4096, budget=budget, intake=True) as served:
            sock = await asyncio.to_thread(socket.create_connection, (served.host, served.port), 30)
            await asyncio.to_thread(sock.sendall, JSON[:-5])  # held back before its last bytes
            await asyncio.to_thread(until, lambda: budget.elsewhere() == len(JSON_BODY), "the body held")
            sock.close()
            await asyncio.to_thread(until, lambda: budget.elsewhere() == 0, "given back")

    asyncio.run(go())


def test_a_restricted_infer_call_needs_its_header_on_either_path():
    restrictions = Restrictions.parse(["inference:X-Key=k1"], [])

    async def scenario(served):
        bare = (await _ask(served, JSON))[0]
        keyed = (await _ask(served, _request(JSON_BODY.encode(), headers={"x-key": "k1"})))[0]
        return bare[0], keyed[0], await _settled(served)

    (*edge, _), (*native, counts) = _both(scenario, restrictions=restrictions)
    assert native == edge == [403, 200]
    assert (counts["requests"], counts["handed"]) == (1, 1)


def test_a_reset_client_cancels_its_request():
    endpoints = _serving(StuckFrontEnd())

    async def go():
        async with http_served(endpoints, intake=True) as served:
            sock = await asyncio.to_thread(socket.create_connection, (served.host, served.port), 30)
            await asyncio.to_thread(sock.sendall, JSON)
            await asyncio.to_thread(until, lambda: endpoints.admission[Priority.BE].in_flight == 1, "admitted")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
            await asyncio.to_thread(until, lambda: endpoints.admission[Priority.BE].in_flight == 0, "given up")
            await asyncio.to_thread(until, lambda: served.intake.counts()["live"] == 0, "its thread gone")

    asyncio.run(go())
    assert b'reason="CANCELED"' in endpoints.metrics.render()


def test_a_stop_answers_what_is_in_hand_then_closes_every_connection():
    release = asyncio.Event()

    class Slow(EchoFrontEnd):
        async def infer(self, spec, request, priority, deadline):
            await release.wait()
            return await super().infer(spec, request, priority, deadline)

    endpoints = _serving(Slow())

    async def go():
        async with http_served(endpoints, intake=True) as served:
            idle = await asyncio.to_thread(socket.create_connection, (served.host, served.port), 30)
            busy = await asyncio.to_thread(socket.create_connection, (served.host, served.port), 30)
            await asyncio.to_thread(busy.sendall, JSON)
            await asyncio.to_thread(until, lambda: endpoints.admission[Priority.BE].in_flight == 1, "admitted")
            stopping = asyncio.create_task(served.intake.stop(10))
            idle_closed = await asyncio.to_thread(idle.recv, 1)
            release.set()
            [(status, headers, _)] = await asyncio.to_thread(http_answers, busy, 1)
            await stopping
            return idle_closed, status, headers.get("connection"), served.intake._native.live()

    assert asyncio.run(go()) == (b"", 200, "close", 0)


BIG = dataclasses.replace(SPEC, inputs=[TensorSpec("x", "FP32", (1 << 18,))], outputs=[TensorSpec("y", "FP32", (1 << 18,))])


class BigEcho(EchoFrontEnd):
    models = {"m": BIG}


class MidEcho(EchoFrontEnd):  # a JSON body of its input's data: past one slice (128 KB), under 1 MB
    models = {"m": dataclasses.replace(SPEC, inputs=[TensorSpec("x", "FP32", (1 << 15,))],
                                       outputs=[TensorSpec("y", "FP32", (1 << 15,))])}  # fmt: skip


def test_answers_the_socket_cannot_take_at_once_are_written_whole_and_in_order():
    """The loop writes an answer at once where the socket takes it; a client that reads nothing
    for a while leaves 1 MB answers to the connection's thread, which writes the rest."""
    x = [np.full((1, 1 << 18), i, np.float32) for i in range(3)]

    def body(i: int) -> bytes:
        header = json.dumps({"id": f"r{i}", "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1 << 18],
                                                        "parameters": {"binary_data_size": x[i].nbytes}}],
                             "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}).encode()  # fmt: skip
        return _request(header + x[i].tobytes(), headers={"Inference-Header-Content-Length": len(header)})

    def go(served):
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(30)
            sock.connect((served.host, served.port))
            sock.sendall(b"".join(body(i) for i in range(3)))
            time.sleep(0.5)  # (not a wait for the server: the client reads late on purpose)
            return http_answers(sock, 3)

    async def scenario(served):
        answers = await asyncio.to_thread(go, served)
        return [(status, out[-4:] == x[i].tobytes()[-4:], len(out)) for i, (status, _, out) in enumerate(answers)]

    async def run(intake: bool):
        async with http_served(_serving(BigEcho()), max_bytes=4 << 20, intake=intake) as served:
            return await scenario(served)

    edge, native = asyncio.run(run(False)), asyncio.run(run(True))
    assert native == edge and [(s, same) for s, same, _ in native] == [(200, True)] * 3


def test_a_connection_idle_after_its_answer_is_closed_after_the_idle_timeout():
    async def scenario(served):
        def go():
            with socket.create_connection((served.host, served.port), timeout=30) as sock:
                sock.sendall(JSON)
                [(status, _, _)] = http_answers(sock, 1)
                return status, sock.recv(1)  # the server closes it: b""

        return await asyncio.to_thread(go)

    assert _both(scenario, idle_timeout_s=0.3) == ((200, b""), (200, b""))


def test_json_tensor_data_is_read_as_on_the_edge_past_one_slice_and_in_a_binary_header():
    mid = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1 << 15],
                                  "data": [1.5] * (1 << 15)}]}).encode()  # fmt: skip
    header = JSON_BODY.encode()  # a binary-extension header that carries its input's data

    async def run(front_end, raw: bytes, intake: bool):
        async with http_served(_serving(front_end), max_bytes=8 << 20, intake=intake) as served:
            [(status, _, body)] = await _ask(served, raw)
            return status, json.loads(body)["outputs"][0]["data"][-2:]

    cases = [(MidEcho(), _request(mid)),
             (EchoFrontEnd(), _request(header, headers={"Inference-Header-Content-Length": len(header)}))]
    edge = [asyncio.run(run(f, raw, False)) for f, raw in cases]
    native = [asyncio.run(run(f, raw, True)) for f, raw in cases]
    assert native == edge == [(200, [1.5, 1.5]), (200, [3.0, 4.0])]


def test_a_json_body_over_a_megabyte_goes_to_the_edge():
    big = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1 << 18],
                                  "data": [1.5] * (1 << 18)}]}).encode()  # fmt: skip

    async def go():
        async with http_served(_serving(BigEcho()), max_bytes=8 << 20, intake=True) as served:
            [(status, _, _)] = await _ask(served, _request(big))
            return len(big) > 1 << 20, status, (await _settled(served))["handed"]

    assert asyncio.run(go()) == (True, 200, 1)


def test_the_servers_local_socket_is_served_as_its_port():
    async def scenario(served):
        def go():
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(30)
                sock.connect("\0" + name)
                sock.sendall(BINARY + JSON + b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                return http_answers(sock, 3)

        over_tcp = await _ask(served, BINARY)
        return over_tcp, await asyncio.to_thread(go), await _settled(served)

    name = f"atoll-test-{os.getpid()}-intake"

    async def go(intake: bool):  # the edge alone, then through the intake: each on a new local socket
        sock, _ = local_socket.listen(name, 4)
        async with http_served(_serving(EchoFrontEnd()), intake=intake, local=sock) as served:
            return await scenario(served)

    answers = asyncio.run(go(False)), asyncio.run(go(True))
    (edge_tcp, edge_local, _), (tcp, local, counts) = answers
    assert [s for s, _, _ in local] == [200, 200, 200] and local[0][2] == tcp[0][2] == edge_tcp[0][2]
    assert [(s, b) for s, _, b in local] == [(s, b) for s, _, b in edge_local]
    assert (counts["requests"], counts["handed"]) == (3, 1)  # two infer calls, then the edge's route
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as late, pytest.raises(ConnectionRefusedError):
        late.connect("\0" + name)  # closed with the server


def test_a_shared_listener_shut_by_another_front_ends_stop_leaves_the_port_served():
    async def scenario(served):
        shared.shutdown(socket.SHUT_RDWR)  # as another front end's stop does to the local socket they share
        return [await _ask(served, BINARY) for _ in range(3)], await _settled(served)

    async def go():
        async with http_served(_serving(EchoFrontEnd()), intake=True, local=shared) as served:
            return await scenario(served)

    shared, _ = local_socket.listen(f"atoll-test-{os.getpid()}-shared", 4)
    answers, counts = asyncio.run(go())
    assert [a[0][0] for a in answers] == [200] * 3 and counts["requests"] == 3
