"""A connection's states (`edge.Receiving`) as reads arrive, driven through its asyncio side
(`get_buffer`, `buffer_updated`, `eof_received`) on a transport that records what is written:
which way a body is read, what a refusal leaves, and when the connection closes. No socket, so no
timing: every step waits for the answers it expects."""

from __future__ import annotations

import asyncio

from tests.atoll.http.test_http_edge import _answers

from atoll.http.bodies import BodyLimits
from atoll.http.connections import HttpConnections
from atoll.http import edge
from atoll.http.edge import Connection, HttpServer
from atoll.http.receiving import Receiving
from atoll.http.messages import HttpResponse, Routes, error

MAX_BYTES = 1024
EARLY_BYTES = 64  # the body's first bytes a route's early answer reads, here


class Transport:
    """What a connection writes, and whether it closed or shut its sending side."""

    def __init__(self):
        self.sent = bytearray()
        self.closed = False
        self.eof = False
        self.protocol: Connection | None = None
        self._wrote = asyncio.Event()

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default  # no socket: no SO_RCVLOWAT, no MSG_TRUNC

    def write(self, data: bytes) -> None:
        self.sent += data
        self._wrote.set()

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)
            self._wrote.set()

    abort = close

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    async def answers(self, count: int) -> list[tuple[str, dict[str, str], bytes]]:
        """The first `count` answers, once written."""
        while len(_answers(bytes(self.sent))) < count:
            self._wrote.clear()
            await asyncio.wait_for(self._wrote.wait(), 30)
        return _answers(bytes(self.sent))[:count]


def _server(timeout_s: float = 30.0) -> HttpServer:
    async def echo(request):
        return HttpResponse(200, bytes(request.body))

    async def live(request):
        return HttpResponse(200, b"live")

    def early(request, prefix: memoryview):  # refuses what starts with b"no", from the body's first bytes
        return error(503, "full", {"Retry-After": "1"}) if bytes(prefix[:2]) == b"no" else None

    routes = Routes()
    routes.add("POST", "/echo", echo, early)
    routes.add("GET", "/live", live)
    return HttpServer(routes, BodyLimits(MAX_BYTES, timeout_s), HttpConnections(8))


def _connect(server: HttpServer) -> tuple[Connection, Transport]:
    connection, transport = Connection(server), Transport()
    transport.protocol = connection
    connection.connection_made(transport)
    return connection, transport


def _receive(connection: Connection, data: bytes) -> None:
    """`data` as the loop hands it over: each read fills at most the buffer the connection offers."""
    view = memoryview(data)
    while view:
        buffer = connection.get_buffer(-1)
        n = min(len(buffer), len(view))
        buffer[:n] = view[:n]
        connection.buffer_updated(n)
        view = view[n:]


def _post(body: bytes, extra: str = "") -> bytes:
    return f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


LIVE = b"GET /live HTTP/1.1\r\nHost: x\r\n\r\n"


def test_a_body_whose_head_ends_a_read_is_read_past_the_parser_into_its_place():
    async def go():
        connection, transport = _connect(_server())
        request = _post(b"x" * 600)
        head = request.index(b"\r\n\r\n") + 4
        _receive(connection, request[:head])
        states = [connection.state, len(connection.get_buffer(-1))]  # the buffer offered: the body's place
        _receive(connection, request[head:])
        return states, await transport.answers(1)

    states, [(status, _, body)] = asyncio.run(go())
    assert states == [Receiving.PLACING, 600]
    assert status == "200" and body == b"x" * 600


def test_a_head_whose_blank_line_straddles_two_reads_has_its_body_read_by_the_parser():
    async def go():
        connection, transport = _connect(_server())
        request = _post(b"y" * 600)
        head = request.index(b"\r\n\r\n") + 4
        _receive(connection, request[:head - 2])
        states = [connection.state]
        _receive(connection, request[head - 2:head + 10])
        states.append(connection.state)
        _receive(connection, request[head + 10:])
        return states, await transport.answers(1)

    states, [(status, _, body)] = asyncio.run(go())
    assert states == [Receiving.HEAD, Receiving.BODY]
    assert status == "200" and body == b"y" * 600


def test_a_request_answered_from_its_first_bytes_has_the_rest_dropped_and_the_connection_serves_on():
    async def go():
        connection, transport = _connect(_server())
        request = _post(b"no" + b"z" * 900)
        _receive(connection, request[:200])
        early = await transport.answers(1)  # before the rest of the body has come
        state = connection.state
        _receive(connection, request[200:] + LIVE)
        return early, state, await transport.answers(2), connection.state

    early, state, answers, after = asyncio.run(go())
    assert [status for status, _, _ in early] == ["503"] and state is Receiving.DROPPING
    assert [(status, body) for status, _, body in answers[1:]] == [("200", b"live")] and after is Receiving.IDLE


def test_a_head_read_alone_has_its_route_asked_again_once_the_bodys_first_bytes_are_in_place(monkeypatch):
    """Most clients write the head, then the body: the read that ends the head holds none of it."""
    monkeypatch.setattr(edge, "EARLY_BYTES", EARLY_BYTES)

    async def go(body: bytes):
        connection, transport = _connect(_server())
        request = _post(body)
        head = len(request) - len(body)
        _receive(connection, request[:head])  # the route is asked with nothing: it cannot tell
        _receive(connection, request[head : head + EARLY_BYTES - 1])
        placing = connection.state
        _receive(connection, request[head + EARLY_BYTES - 1 : head + EARLY_BYTES])  # asked again, now
        early = connection.state
        _receive(connection, request[head + EARLY_BYTES :] + LIVE)
        return placing, early, [(status, body[:4]) for status, _, body in await transport.answers(2)]

    assert asyncio.run(go(b"no" + b"z" * 3 * EARLY_BYTES)) == (
        Receiving.PLACING, Receiving.DROPPING, [("503", b'{"er'), ("200", b"live")])
    assert asyncio.run(go(b"ok" + b"z" * 3 * EARLY_BYTES))[1:] == (
        Receiving.PLACING, [("200", b"okzz"), ("200", b"live")])


def test_a_refusal_ends_reading_and_says_whether_a_body_was_on_its_way():
    """Mid-head (a header line over the bound) and mid-body (a body over the limit): the 400 or
    413 is the last answer, the connection shuts its side and lingers, dropping what still comes;
    only the second counts as a body arriving when connections are closed to make room."""
    in_head = b"GET /live HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 9000 + b"\r\n\r\n"
    in_body = _post(b"b" * 600).replace(b"600", b"6000", 1)

    async def go(sent: bytes):
        connection, transport = _connect(_server())
        _receive(connection, sent)
        [(status, _, _)] = await transport.answers(1)
        _receive(connection, LIVE)  # dropped: no request is held
        return status, connection.state, connection.receiving_body, connection.holds_request, transport.eof, \
            transport.closed  # fmt: skip

    assert asyncio.run(go(in_head)) == ("400", Receiving.REFUSED_IN_HEAD, False, False, True, False)
    assert asyncio.run(go(in_body)) == ("413", Receiving.REFUSED_IN_BODY, True, False, True, False)


def test_a_body_refused_once_whole_ends_the_connection_after_the_answers_before_it():
    """A body that cannot be decoded is refused between requests: nothing of a request is on its
    way, so the connection closes once the 400 is written, without lingering."""
    async def go():
        connection, transport = _connect(_server())
        _receive(connection, _post(b"ok") + _post(b"\x1f\x8bgarbage", "Content-Encoding: gzip\r\n"))
        state = connection.state
        answers = await transport.answers(2)
        return state, answers, transport.eof, transport.closed

    state, answers, eof, closed = asyncio.run(go())
    assert state is Receiving.ENDED
    assert [(status, headers.get("Connection")) for status, headers, _ in answers] == [("200", None), ("400", "close")]
    assert (eof, closed) == (False, True)


def test_a_client_that_half_closes_after_whole_requests_gets_their_answers_then_the_connection_closes():
    async def go():
        connection, transport = _connect(_server())
        _receive(connection, _post(b"1") + _post(b"2"))
        kept = connection.eof_received()
        answers = await transport.answers(2)
        return kept, connection.state, answers, transport.closed

    kept, state, answers, closed = asyncio.run(go())
    assert kept is True and state is Receiving.ENDED and closed
    assert [(body, headers.get("Connection")) for _, headers, body in answers] == [(b"1", None), (b"2", "close")]


def test_a_request_asking_to_upgrade_is_answered_as_http_1_1_then_the_connection_closes():
    async def go():
        connection, transport = _connect(_server())
        _receive(connection, b"GET /live HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n" + LIVE)
        state, held = connection.state, connection.holds_request
        answers = await transport.answers(1)
        return state, held, answers, transport.closed, connection.holds_request

    state, held, [(status, headers, _)], closed, held_after = asyncio.run(go())
    assert state is Receiving.ENDED and held and status == "200" and headers["Connection"] == "close" and closed
    assert not held_after  # the request after it was never read


def test_a_body_that_does_not_arrive_in_time_is_answered_408():
    """The body timeout at 0 s: it passes at the loop's next turn, with the body still to come."""
    async def go():
        connection, transport = _connect(_server(timeout_s=0.0))
        _receive(connection, _post(b"t" * 600)[:-100])
        return await transport.answers(1), connection.state

    [(status, headers, _)], state = asyncio.run(go())
    assert status == "408" and headers["Connection"] == "close" and state is Receiving.REFUSED_IN_BODY
