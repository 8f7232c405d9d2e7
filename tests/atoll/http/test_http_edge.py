"""HTTP/1.1 as clients speak it to a front end's edge (`http/edge.py`), over raw sockets where a
client library would hide what is on the wire: 100-continue, HEAD, pipelining, HTTP/1.0, chunked
bodies, percent-encoded paths, and a 413 that reaches a client still sending its body."""

import asyncio
import contextlib
import json

from gpu_runtime.priority import Priority
from tests.atoll.front_end.test_server_errors import BODY, EchoFrontEnd, StuckFrontEnd, _serving
from tests.atoll.http_served import http_served

from atoll.http.edge import HEAD_READ
from atoll.http.messages import HttpRequest, Routes
from atoll.http.refusal_pace import RefusalPace

# The JSON header of a binary-extension request with one FP32 [1, 2] input (8 bytes after it)
BINARY_HEADER = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2],
                                        "parameters": {"binary_data_size": 8}}]}).encode()  # fmt: skip


async def _talk(sent: bytes, *, expect_close: bool = True, pause_after: bytes | None = None, rest: bytes = b""):
    """What the server answers to `sent` (all of it, if it closes; else what came within 1 s)."""
    async with http_served(_serving(EchoFrontEnd()), max_bytes=1 << 16) as client:
        reader, writer = await asyncio.open_connection(client.host, client.port)
        try:
            writer.write(sent)
            if pause_after is not None:  # wait for the server's word before sending the rest
                first = await asyncio.wait_for(reader.readuntil(pause_after), 30)
                writer.write(rest)
            else:
                first = b""
            if expect_close:
                return first + await asyncio.wait_for(reader.read(), 30)
            chunks = [first]
            try:
                while chunk := await asyncio.wait_for(reader.read(1 << 16), 1.0):
                    chunks.append(chunk)
            except TimeoutError:
                pass
            return b"".join(chunks)
        finally:
            writer.close()


def _infer(body: bytes = BODY.encode(), extra: str = "", version: str = "1.1") -> bytes:
    return (f"POST /v2/models/m/infer HTTP/{version}\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
            .encode() + body)  # fmt: skip


@contextlib.asynccontextmanager
async def _full(pace=None):
    """A server whose only place is taken (a request admitted, then stuck): every infer request
    after it is refused at admission; `pace(server)`, where given, paces its 503s. Yields
    (server, client)."""
    server = _serving(StuckFrontEnd(), max_pending=1, timeout_s=30)
    async with http_served(server, pace=pace(server) if pace else None) as client:
        held = asyncio.ensure_future(client.post("/v2/models/m/infer", data=BODY))
        while not server.admission[Priority.BE].in_flight:
            assert not held.done(), f"the first request ended before it was admitted: {held.result()}"
            await asyncio.sleep(0.01)
        try:
            yield server, client
        finally:
            held.cancel()


def _answers(raw: bytes) -> list[tuple[str, dict[str, str], bytes]]:
    """(status, headers, body) of each answer in `raw`, by their Content-Length."""
    out = []
    while raw:
        head, _, raw = raw.partition(b"\r\n\r\n")
        status, *lines = head.decode().split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines)
        size = int(headers.get("Content-Length", 0))
        out.append((status.split(" ")[1], headers, raw[:size]))
        raw = raw[size:]
    return out


def test_a_client_that_expects_100_continue_gets_it_before_sending_its_body():
    raw = asyncio.run(_talk(_infer(extra="Expect: 100-continue\r\n").split(b"\r\n\r\n")[0] + b"\r\n\r\n",
                            pause_after=b"\r\n\r\n", rest=BODY.encode(), expect_close=False))
    assert raw.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert json.loads(_answers(raw.removeprefix(b"HTTP/1.1 100 Continue\r\n\r\n"))[0][2])["outputs"][0]["data"] == [1, 2]


def test_head_answers_a_get_route_without_its_body_and_405_names_the_methods_allowed():
    sent = (b"HEAD /v2 HTTP/1.1\r\nHost: x\r\n\r\n"
            b"DELETE /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")  # fmt: skip
    raw = asyncio.run(_talk(sent))
    head, rest = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200") and b"Content-Length: " in head and b"Content-Length: 0" not in head
    [(not_allowed, headers, body), (live, _, _)] = _answers(rest)  # HEAD's answer had no body
    assert not_allowed == "405" and headers["Allow"] == "GET, HEAD" and json.loads(body)["error"] == "Method Not Allowed"
    assert live == "200"


def test_pipelined_requests_are_answered_in_order_and_http_1_0_closes_after_its_answer():
    bodies = [json.dumps({"id": str(k), "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2],
                                                    "data": [k, k]}]}).encode() for k in range(20)]  # fmt: skip
    sent = b"".join(_infer(b) for b in bodies[:-1]) + _infer(bodies[-1], version="1.0")
    answers = _answers(asyncio.run(_talk(sent)))  # the server closes after the HTTP/1.0 answer
    assert [json.loads(body)["id"] for _, _, body in answers] == [str(k) for k in range(20)]
    assert answers[-1][1].get("Connection") == "close" and "Connection" not in answers[0][1]


def test_chunked_bodies_and_percent_encoded_paths_are_read():
    chunked = BODY.encode()
    sent = (b"POST /v2/models/%6D/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            + b"".join(f"{len(chunked[i:i + 7]):x}\r\n".encode() + chunked[i:i + 7] + b"\r\n"
                       for i in range(0, len(chunked), 7)) + b"0\r\n\r\n")  # fmt: skip
    [(status, _, body)] = _answers(asyncio.run(_talk(sent)))
    assert status == "200" and json.loads(body)["outputs"][0]["data"] == [1, 2]


def test_a_client_still_sending_a_body_over_the_limit_reads_the_413_rather_than_a_reset():
    big = b"x" * (4 << 20)  # far past the limit (64 KiB) and the socket buffers: it is still sending

    async def go():
        async with http_served(_serving(EchoFrontEnd()), max_bytes=1 << 16) as client:
            reader, writer = await asyncio.open_connection(client.host, client.port)
            writer.write(_infer(big))
            answer = await asyncio.wait_for(reader.read(), 30)  # the server stops sending, then closes
            writer.transport.abort()
            return answer

    [(status, headers, body)] = _answers(asyncio.run(go()))
    assert status == "413" and headers["Connection"] == "close" and "65536" in json.loads(body)["error"]


def test_routes_match_segments_and_capture_them_decoded():
    async def handler(request):
        return request.params

    routes = Routes()
    routes.add("GET", "/v2/models/{model}", handler)
    routes.add("GET", "/v2/models/{model}/versions/{version}", handler)
    routes.add("POST", "/v2/models/{model}/infer", handler)
    routes.add("GET", "/v2/models/stats", handler)

    def resolved(method: str, path: str):
        request = HttpRequest(method, path, "", {})
        try:
            routes.resolve(request)
        except Exception as exc:  # noqa: BLE001 (the error is the answer here)
            return getattr(exc, "message", str(exc))
        return request.params

    assert resolved("GET", "/v2/models/a%2Fb") == {"model": "a/b"}
    assert resolved("GET", "/v2/models/m/versions/3") == {"model": "m", "version": "3"}
    assert resolved("POST", "/v2/models/m/infer") == {"model": "m"}
    assert resolved("GET", "/v2/models/stats") == {}  # a fixed segment, not a model named "stats"
    assert resolved("GET", "/v2/models/m/infer") == "Method Not Allowed"
    assert resolved("GET", "/v2/models/m/nope") == "Not Found"


def test_a_request_arriving_in_pieces_is_read_wherever_the_pieces_split():
    """A body of known length is read past the parser once its head has ended (`Connection._parse`);
    a head whose blank line straddles two reads takes the parser's way. Either way: the same answer."""
    whole = _infer() + _infer(extra="Connection: close\r\n")
    blank = whole.index(b"\r\n\r\n")
    splits = [[blank + 2], [blank + 4], [blank + 4 + 10], list(range(1, len(whole)))]  # the last: byte by byte

    async def go(cuts):
        async with http_served(_serving(EchoFrontEnd())) as client:
            reader, writer = await asyncio.open_connection(client.host, client.port)
            for start, stop in zip([0, *cuts], [*cuts, len(whole)]):
                writer.write(whole[start:stop])
                await writer.drain()
                await asyncio.sleep(0.002 if len(cuts) < 10 else 0)  # separate reads (often: not guaranteed)
            answer = await asyncio.wait_for(reader.read(), 30)
            writer.close()
            return answer

    for cuts in splits:
        answers = _answers(asyncio.run(go(cuts)))
        assert [(status, json.loads(body)["outputs"][0]["data"]) for status, _, body in answers] == [("200", [1, 2])] * 2


def test_an_overload_refusal_is_answered_from_the_json_header_before_the_body_and_the_connection_serves_on():
    """Binary-extension requests put their JSON header first: admission's 503 is answered from it
    while the rest of the body is still on its way, and that rest is dropped, not parsed."""
    header = BINARY_HEADER
    body = header + bytes(8) + b"\xff" * 100_000  # a body longer than it says: the rest is never read as tensors
    head = (f"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
            f"Inference-Header-Content-Length: {len(header)}\r\n\r\n").encode()  # fmt: skip

    async def go():
        async with _full() as (server, client):
            reader, writer = await asyncio.open_connection(client.host, client.port)
            writer.write(head + body[:len(header) + 100])
            early = await asyncio.wait_for(reader.readuntil(b'"}'), 30)  # before the rest is sent
            writer.write(body[len(header) + 100:] + b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            rest = await asyncio.wait_for(reader.read(), 30)
            writer.close()
            return early + rest, server.metrics.render()

    raw, metrics = asyncio.run(go())
    (status, headers, body_503), (live, _, _) = _answers(raw)
    assert status == "503" and int(headers["Retry-After"]) >= 1 and "overloaded" in json.loads(body_503)["error"]
    assert live == "200"
    assert b'nv_inference_request_failure{model="m",reason="OVERLOAD",version="1"} 1.0' in metrics


def test_the_rest_of_a_refused_body_is_discarded_in_the_kernel_and_never_read():
    """Past a request's first read (its head and JSON header, `HEAD_READ`), the body of an early
    refusal is dropped by the kernel (MSG_TRUNC) and never copied into the edge's read buffer:
    three refused 200 KB requests and a GET in one write are answered in order, and the buffer
    holds at most a first read's worth of the bodies' bytes."""
    refused = _infer(BINARY_HEADER + bytes(8) + b"\xab" * 200_000,
                     f"Inference-Header-Content-Length: {len(BINARY_HEADER)}\r\n")

    async def go():
        async with _full() as (_, client):
            reader, writer = await asyncio.open_connection(client.host, client.port)
            writer.write(refused * 3 + b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            raw = await asyncio.wait_for(reader.read(), 30)
            writer.close()
            return raw, client.edge.raw.count(0xAB)

    raw, copied = asyncio.run(go())
    assert [status for status, _, _ in _answers(raw)] == ["503", "503", "503", "200"]
    assert copied <= HEAD_READ


def test_503s_past_the_pace_wait_their_turn_and_every_one_is_answered():
    """A client resending refused requests at once is slowed to the pace (`refusal_pace`): here one
    503 goes at once, and each one after it waits (the longest hold: this pace's next turn is
    far off), whether the refusal came after the body (JSON) or from the header (binary)."""
    binary = _infer(BINARY_HEADER + bytes(8), f"Inference-Header-Content-Length: {len(BINARY_HEADER)}\r\n")

    async def go():
        async with _full(lambda server: RefusalPace(1, lambda: None, server.metrics.refusals_held, 0.001)) as (server, client):
            statuses = []
            for _ in range(2):
                async with client.post("/v2/models/m/infer", data=BODY) as r:
                    statuses.append(r.status)
            reader, writer = await asyncio.open_connection(client.host, client.port)
            writer.write(binary + b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            raw = await asyncio.wait_for(reader.read(), 30)
            writer.close()
            return statuses + [status for status, _, _ in _answers(raw)], server.metrics.render()

    statuses, metrics = asyncio.run(go())
    assert statuses == [503, 503, "503", "200"]
    assert b"atoll_refusals_held_total 2.0" in metrics


def test_a_compressed_body_declaring_more_than_the_limit_on_the_wire_is_refused_before_it_is_read():
    """Its Content-Length alone decides: nothing the size of what it declares is ever allocated."""
    sent = (b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
            b"Content-Length: 100000000000\r\n\r\n" + b"\x1f\x8b" * 10)  # fmt: skip
    [(status, headers, body)] = _answers(asyncio.run(_talk(sent)))
    assert status == "413" and headers["Connection"] == "close" and "65536" in json.loads(body)["error"]
