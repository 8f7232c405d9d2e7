"""The server's answers when the front end is slow, the server is full, or the client is hostile:
bodies too large, badly encoded or too slow, unknown endpoints, readiness (an aiohttp client, and
raw sockets where a client library would not send what a hostile client does)."""

import asyncio
import gzip
import json
import logging
from pathlib import Path

import numpy as np
import pytest
from gpu_runtime.priority import Priority
from tests.atoll.http_served import http_served

from atoll.front_end.endpoints import Endpoints
from atoll.http import edge as http_edge
from atoll.kserve.shm_registry import Regions
from atoll.observe.metrics import Metrics
from atoll.observe.throttled import Throttled
from atoll.repository.specs import ModelSpec, TensorSpec
from atoll.wire.model_control import IndexModels

SPEC = ModelSpec("m", "1", Path("m.onnx"), "onnxruntime_onnx", 8, [TensorSpec("x", "FP32", (2,))],
                 [TensorSpec("y", "FP32", (2,))], "none", "none")  # fmt: skip
BODY = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]})
RT_BODY = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}],
                      "parameters": {"priority": 1}})


class StuckFrontEnd:
    """A front end whose batches never come back (a hung vGPU)."""

    models = {"m": SPEC}

    async def infer(self, spec, request, priority, deadline):
        await asyncio.sleep(3600)


class EchoFrontEnd:
    """A front end that answers at once: y = x."""

    models = {"m": SPEC}

    async def infer(self, spec, request, priority, deadline):
        return {"y": request.inputs[0].data.astype(np.float32)}


class Supervisor:
    """The supervisor's repository index: every model loaded."""

    async def ask(self, action):
        assert isinstance(action, IndexModels)
        return [{"name": "m", "version": "1", "state": "READY"}]


def _endpoints(front_end=None, **kw) -> Endpoints:
    return Endpoints(front_end or StuckFrontEnd(), Metrics(), Regions(), Supervisor(), **kw)


def _serving(front_end, **kw) -> Endpoints:
    endpoints = _endpoints(front_end, **kw)
    endpoints.ready = True
    endpoints.ready_models = frozenset({SPEC.key})
    return endpoints


def _post(server: Endpoints, n: int = 1, rt: int = 0) -> list[tuple[int, dict]]:
    async def go():
        async with http_served(server) as client:
            responses = await asyncio.gather(
                *(client.post("/v2/models/m/infer", data=body) for body in [BODY] * n + [RT_BODY] * rt))
            return [(r.status, await r.json()) for r in responses]

    return asyncio.run(go())


def test_unanswered_request_times_out_with_504():
    server = _endpoints(timeout_s=0.2)
    server.ready = True
    [(status, body)] = _post(server)
    assert status == 504 and "0.2 s" in body["error"]
    assert all(a.in_flight == 0 for a in server.admission.values())  # its place is given back
    assert b'reason="TIMEOUT"' in server.metrics.render()


def test_a_fixed_bound_refuses_with_503_and_retry_after():
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


def test_every_error_is_json_even_for_unknown_endpoints_and_methods():
    async def go():
        async with http_served(_serving(EchoFrontEnd())) as client:
            out = []
            for method, path in (("GET", "/v2/nope"), ("POST", "/v2/health/ready"), ("GET", "/v2/models/nope"),
                                 ("GET", "/v2/models/m/versions/7/ready")):  # fmt: skip
                r = await client.request(method, path)
                out.append((r.status, r.headers["Content-Type"], (await r.json())["error"]))
            return out

    results = asyncio.run(go())
    assert [status for status, _, _ in results] == [404, 405, 404, 400]  # an unknown version's readiness: Triton's 400
    assert all(kind.startswith("application/json") and message for _, kind, message in results)
    assert results[0][2] == "Not Found" and results[1][2] == "Method Not Allowed"  # as Triton words them


def test_json_nested_past_the_recursion_limit_is_a_400_on_every_json_endpoint():
    """Python's json raises RecursionError, not a decode error, for `[[[[...]]]]`: it was a 500
    with a traceback in the log."""
    deep = b'{"parameters": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b"}"

    async def go():
        async with http_served(_serving(EchoFrontEnd())) as client:
            out = []
            for path in ("/v2/models/m/infer", "/v2/repository/index", "/v2/repository/models/m/load"):
                r = await client.post(path, data=deep)
                out.append((r.status, (await r.json())["error"]))
            return out

    assert [(status, "nests too deeply" in reason) for status, reason in asyncio.run(go())] == [(400, True)] * 3


@pytest.mark.parametrize("head, reason", [
    (b"GET /v2 HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", "Invalid character in Content-Length"),
    (b"BL\x00AH /v2 HTTP/1.1\r\nHost: x\r\n\r\n", "Invalid method"),
    (b"GET /v2 HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 9000 + b"\r\n\r\n", "header line over 8190 bytes"),
    (b"GET /v2 HTTP/1.1\r\n" + b"X: aaaaaaaa\r\n" * 8000, "request head over 65536 bytes"),
    (b"POST /v2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
    (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "HTTP/2 (PRI)"),  # an HTTP/2 client on the HTTP/1 port
])
def test_what_the_http_parser_refuses_is_a_json_400_logged_at_info_without_a_traceback(caplog, monkeypatch,
                                                                                       head, reason):
    """aiohttp, which served here before, answered these in plain text and logged each at ERROR
    with a ~10-line traceback."""
    async def talk(reader, writer):
        writer.write(head)
        return (await asyncio.wait_for(reader.read(), 30)).decode()  # the server closes after the answer

    # each case's line, not only the first in 10 s
    monkeypatch.setattr(http_edge, "_refusals", Throttled(logging.getLogger("atoll.http.edge"), every_s=0))
    with caplog.at_level(logging.INFO):
        answer = asyncio.run(_served_raw(_serving(EchoFrontEnd()), talk))
    status, _, body = answer.partition("\r\n\r\n")
    assert status.split(" ")[1] == "400" and "application/json" in status, answer
    assert reason.lower() in json.loads(body)["error"].lower()
    assert [(r.levelno, r.exc_info) for r in caplog.records if "malformed HTTP" in r.getMessage()] == [(logging.INFO, None)]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_unexpected_exception_is_a_json_500_without_a_traceback(caplog):
    class Broken:
        models = {"m": SPEC}

        async def infer(self, spec, request, priority, deadline):
            return {"y": object()}  # the encoder chokes on it

    async def go():
        async with http_served(_serving(Broken())) as client:
            r = await client.post("/v2/models/m/infer", data=BODY)
            return r.status, await r.json()

    status, body = asyncio.run(go())
    assert status == 500 and set(body) == {"error"} and "Traceback" not in body["error"]
    assert " at 0x" not in body["error"]  # no object reprs


@pytest.mark.parametrize("how", ["content-length", "chunked", "gzip"])
def test_bodies_over_the_limit_get_413(how):
    big = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}],
                      "id": "x" * 5000}).encode()  # fmt: skip

    async def chunks():
        for i in range(0, len(big), 1000):
            yield big[i:i + 1000]

    async def go():
        async with http_served(_serving(EchoFrontEnd()), max_bytes=4096) as client:
            if how == "gzip":  # small on the wire, over the limit once decoded
                r = await client.post("/v2/models/m/infer", data=gzip.compress(big),
                                      headers={"Content-Encoding": "gzip"})  # fmt: skip
            else:
                r = await client.post("/v2/models/m/infer", data=big if how == "content-length" else chunks())
            return r.status, await r.json()

    status, body = asyncio.run(go())
    assert status == 413 and "4096" in body["error"]


def test_compressed_bodies_are_decoded_and_garbage_labelled_gzip_is_a_400():
    async def go():
        async with http_served(_serving(EchoFrontEnd())) as client:
            out = []
            for data, encoding in ((gzip.compress(BODY.encode()), "gzip"), (b"garbage" * 50, "gzip"),
                                   (b"garbage" * 50, "deflate")):  # fmt: skip
                r = await client.post("/v2/models/m/infer", data=data, headers={"Content-Encoding": encoding})
                out.append((r.status, await r.json()))
            return out

    (ok, good), (bad, why), (bad2, _) = asyncio.run(go())
    assert ok == 200 and good["outputs"][0]["data"] == [1.0, 2.0]
    assert bad == bad2 == 400 and "content-encoding" in why["error"]


def test_a_body_that_does_not_arrive_in_time_gets_408_and_never_counts_as_pending():
    server = _serving(EchoFrontEnd())

    async def go():
        async with http_served(server, body_timeout_s=0.3) as client:
            reader, writer = await asyncio.open_connection(client.host, client.port)
            writer.write(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
            await writer.drain()
            await asyncio.sleep(0.1)
            pending = sum(a.in_flight for a in server.admission.values())
            head = await asyncio.wait_for(reader.read(1000), 30)
            writer.close()
            return pending, head.decode()

    pending, head = asyncio.run(go())
    assert pending == 0  # a slow body holds its connection only
    assert head.startswith("HTTP/1.1 408") and '"error"' in head and "0.3 s" in head


def test_readiness_follows_which_models_have_a_live_worker():
    server = _serving(EchoFrontEnd())

    async def go():
        async with http_served(server) as client:
            out = []
            for models in ({SPEC.key}, set()):
                server.ready_models = frozenset(models)
                health = await client.get("/v2/health/ready")
                model = await client.get("/v2/models/m/ready")
                index = await (await client.post("/v2/repository/index")).json()
                out.append((health.status, model.status, index[0]["state"]))
            return out

    assert asyncio.run(go()) == [(200, 200, "READY"), (503, 400, "UNAVAILABLE")]  # 400: Triton's


def test_an_overload_refusal_says_when_to_retry():
    server = _serving(StuckFrontEnd(), max_pending=1, timeout_s=30)

    async def go():
        async with http_served(server) as client:
            held = asyncio.ensure_future(client.post("/v2/models/m/infer", data=BODY))
            while not server.admission[Priority.BE].in_flight:  # the first is admitted (and stuck)
                await asyncio.sleep(0.01)
            refused = await client.post("/v2/models/m/infer", data=BODY)
            held.cancel()
            return refused.status, refused.headers.get("Retry-After"), (await refused.json())["error"]

    status, retry_after, reason = asyncio.run(go())
    assert status == 503 and int(retry_after) >= 1 and "overloaded" in reason


def test_connections_closed_mid_request_are_one_info_line_every_10_s(caplog, monkeypatch):
    """A client can close mid-body at will: each was an INFO line, as requests whose client went
    away after sending were before they were throttled too (40,000 lines in a minute)."""
    monkeypatch.setattr(http_edge, "_gone", Throttled(logging.getLogger("atoll.http.edge")))  # its 10 s start afresh
    server = _serving(EchoFrontEnd())

    async def go():
        async with http_served(server) as client:
            for _ in range(100):
                reader, writer = await asyncio.open_connection(client.host, client.port)
                writer.write(_infer_head(len(BODY)) + BODY.encode()[:5])
                await writer.drain()
                writer.close()
                await writer.wait_closed()
            r = await client.post("/v2/models/m/infer", data=BODY)  # served on: each close was seen by now
            return r.status

    with caplog.at_level(logging.INFO):
        assert asyncio.run(go()) == 200
    assert [r.levelno for r in caplog.records if "closed mid-request" in r.getMessage()] == [logging.INFO]
    assert sum(a.in_flight for a in server.admission.values()) == 0


async def _served_raw(endpoints: Endpoints, talk):
    """`talk(reader, writer)` on a connection to `endpoints` served as a front end serves them."""
    async with http_served(endpoints) as client:
        reader, writer = await asyncio.open_connection(client.host, client.port)
        try:
            return await talk(reader, writer)
        finally:
            writer.close()


def _infer_head(length: int) -> bytes:
    return f"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode()


@pytest.mark.parametrize("pipelined", [False, True])
def test_a_request_sent_whole_then_half_closed_is_answered_then_the_connection_closed(pipelined):
    """Triton answers a client that shuts its sending side after the request (`nc -N`, some
    HTTP/1.0 tools); aiohttp took the end of the stream for the client leaving and cancelled it, so
    the client read nothing. Pipelined: both requests are answered, in order."""
    body = BODY.encode()
    second = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [3, 4]}]}).encode()
    sent = _infer_head(len(body)) + body + (_infer_head(len(second)) + second if pipelined else b"")

    async def talk(reader, writer):
        writer.write(sent)
        writer.write_eof()
        return await asyncio.wait_for(reader.read(), 30)  # all of it: the server closes after answering

    answer = asyncio.run(_served_raw(_serving(EchoFrontEnd()), talk)).decode()
    answers = answer.split("HTTP/1.1 ")[1:]
    assert len(answers) == (2 if pipelined else 1), answer
    for text, expected in zip(answers, ([1, 2], [3, 4])):
        head, _, payload = text.partition("\r\n\r\n")
        assert head.startswith("200") and json.loads(payload)["outputs"][0]["data"] == expected, text


@pytest.mark.parametrize("sent", [b"", _infer_head(len(BODY)) + BODY.encode()[:5]], ids=["idle", "body cut short"])
def test_a_half_close_with_nothing_whole_to_answer_closes_the_connection(sent):
    async def talk(reader, writer):
        writer.write(sent)
        writer.write_eof()
        return await asyncio.wait_for(reader.read(), 30)

    assert asyncio.run(_served_raw(_serving(EchoFrontEnd()), talk)) == b""
