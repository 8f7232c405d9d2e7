"""The endpoint's per-request forwarding parts alone: the node client against a bare socket server
(answers, kept-alive reuse, a node that never answers, one that closed a kept connection), what the
HTTP route reads of a request for its priority, and the endpoint's heap settings."""

from __future__ import annotations

import asyncio

import pytest

from atoll.bench.bodies import http_body
from atoll.cluster.heap import tune_heap
from atoll.cluster.http_proxy import _real_time
from atoll.cluster.node_client import NodeGone, NodeHttp
from atoll.http.messages import HttpRequest
from atoll.kserve.protocol import HEADER_LENGTH

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


async def _server(handle) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length"))
    return head + await reader.readexactly(length)


def test_answers_come_back_whole_on_one_kept_connection():
    async def run():
        connections, seen = [], []

        async def handle(reader, writer):
            connections.append(writer)
            while True:
                try:
                    seen.append(await _read_request(reader))
                except asyncio.IncompleteReadError:
                    return
                writer.write(ANSWER)

        server, address = await _server(handle)
        node = NodeHttp(address)
        body = bytes(range(256)) * 4096  # 1 MB: more than a socket takes in one write
        answers = [await node.request("POST", "/v2/models/m/infer", {"x-key": "k"}, body) for _ in range(3)]
        node.close()
        server.close()
        return answers, seen, connections

    answers, seen, connections = asyncio.run(run())
    assert [(a.status, a.body, a.headers["content-type"]) for a in answers] == [(200, b"{}", "application/json")] * 3
    assert len(connections) == 1
    assert all(s.startswith(b"POST /v2/models/m/infer HTTP/1.1\r\n") and b"\r\nx-key: k\r\n" in s for s in seen)
    assert all(s.endswith(bytes(range(256)) * 4096) for s in seen)


def test_a_node_that_never_answers_times_out_and_its_connection_is_dropped():
    async def run():
        closed = asyncio.Event()

        async def handle(reader, writer):
            await _read_request(reader)
            await reader.read()  # nothing answered; returns when the endpoint drops the connection
            closed.set()

        server, address = await _server(handle)
        node = NodeHttp(address)
        with pytest.raises(TimeoutError):
            await node.request("GET", "/v2/health/ready", timeout_s=0.2)
        await asyncio.wait_for(closed.wait(), 5)
        server.close()
        return node

    assert asyncio.run(run())._idle == []


def test_a_kept_connection_the_node_closed_is_replaced_and_a_closed_port_is_node_gone():
    async def run():
        async def handle(reader, writer):
            await _read_request(reader)
            writer.write(ANSWER)
            await writer.drain()
            writer.close()  # closes each connection after one answer, without saying so

        server, address = await _server(handle)
        node = NodeHttp(address)
        first = await node.request("GET", "/a")
        await asyncio.sleep(0.05)
        second = await node.request("GET", "/b")
        server.close()
        await server.wait_closed()
        node.close()
        with pytest.raises(NodeGone):
            await node.request("GET", "/c", timeout_s=2)
        return first, second

    first, second = asyncio.run(run())
    assert first.status == second.status == 200


def _request(body: bytes, headers: dict[str, str]) -> HttpRequest:
    request = HttpRequest("POST", "/v2/models/m/infer", "", {k.lower(): v for k, v in headers.items()})
    request.body = bytearray(body)
    return request


@pytest.mark.parametrize("priority, rt", [(0, False), (1, True), (2, False)])
def test_priority_is_read_from_the_json_part_alone(priority, rt):
    data = b'"priority": 1' * 100  # in the binary data, not the JSON: never read
    assert _real_time(_request(*http_body("x", "BYTES", [1], data, priority))) is rt
    body, _ = http_body("x", "BYTES", [1], data, priority)
    header = body[: -len(data)]
    assert _real_time(_request(header, {"content-type": "application/json"})) is rt  # a JSON body, no tensors
    assert _real_time(_request(b"not json, priority", {HEADER_LENGTH: "18"})) is False


def test_heap_settings_skip_those_the_environment_set(monkeypatch):
    monkeypatch.setenv("MALLOC_TOP_PAD_", str(16 << 20))
    applied = tune_heap({"MALLOC_TOP_PAD_": str(16 << 20), "MALLOC_TRIM_THRESHOLD_": str(128 << 20), "OTHER": "1"})
    assert applied in ([], ["MALLOC_TRIM_THRESHOLD_"])  # [] where the C library is not glibc
