"""The endpoint's HTTP/1.1 client to one node: kept-alive connections (a pool), each request's body
written as received and its answer parsed by httptools (llhttp, as the edge parses requests), on
the endpoint's event loop with no thread hop. A node that cannot be reached, or whose connection
ends before the answer, raises `NodeGone`: the caller tries another node.
"""

from __future__ import annotations

import asyncio

import httptools

from atoll.http import local_socket
from atoll.http.deadline import Deadline

MAX_IDLE = 64  # kept-alive connections per node beyond which an answered one is closed


class NodeGone(ConnectionError):
    """The node did not answer: refused, reset, or closed before its answer was whole."""


class Answer:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status = status
        self.headers = headers  # names in lower case
        self.body = body


class _Connection(asyncio.Protocol):
    """One connection to the node, carrying one request at a time."""

    def __init__(self):
        self.transport: asyncio.Transport | None = None
        self.answer: asyncio.Future | None = None
        self.received = False  # a byte of the current answer has arrived
        self._parser = httptools.HttpResponseParser(self)
        self._headers: dict[str, str] = {}
        self._chunks: list[bytes] = []
        self.deadline: Deadline | None = None  # of the request in hand: one timer, kept armed across requests

    @property
    def open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def send(self, head: bytes, body) -> asyncio.Future:
        self.answer = asyncio.get_running_loop().create_future()
        self.received = False
        self._headers, self._chunks = {}, []
        self.transport.write(head)
        if body:  # apart: the transport's writelines would join them, a copy of the whole body
            self.transport.write(body)
        return self.answer

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.deadline = Deadline(asyncio.get_running_loop())

    def expire(self) -> None:
        self._fail(TimeoutError())

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(NodeGone(f"unreadable answer: {exc}"))
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.deadline.stop()
        self._fail(NodeGone(f"connection closed before the answer ({exc or 'end of stream'})"))

    def _fail(self, exc: Exception) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(exc)

    # -- httptools' callbacks -----------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if self.answer is not None and not self.answer.done():
            self.answer.set_result(Answer(self._parser.get_status_code(), self._headers, body))
        if not self._parser.should_keep_alive():
            self.transport.close()


class NodeHttp:
    """Requests to the node at `address` ("host:port"), through its `local` socket instead where
    that is on this host (`local_socket.reachable`). `relay_to` is where the native relay sends
    them: "host:port", or "@" and the local socket's abstract name."""

    def __init__(self, address: str, local: str = ""):
        self.address = address
        host, _, port = address.rpartition(":")
        self._host, self._port = host.strip("[]"), int(port)
        self._local = local_socket.reachable(local) if local else None
        self.relay_to = address if self._local is None else f"@{self._local}"
        self._idle: list[_Connection] = []

    async def request(self, method: str, target: str, headers: dict[str, str] | None = None, body=b"",
                      timeout_s: float = 30.0) -> Answer:  # fmt: skip
        """The node's answer to one request; NodeGone if there is none, TimeoutError after
        `timeout_s`. A kept-alive connection the node had closed meanwhile is replaced once."""
        head = f"{method} {target} HTTP/1.1\r\nHost: {self.address}\r\nContent-Length: {len(body)}\r\n"
        if headers:
            head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        head = (head + "\r\n").encode("latin-1")
        loop = asyncio.get_running_loop()
        # the connection's Deadline rather than asyncio.timeout: no timer set and cancelled per request
        deadline = loop.time() + timeout_s
        while True:
            connection = self._kept()
            reused = connection is not None
            if connection is None:
                connection = await self._connect(deadline)
            answer = connection.send(head, body)
            connection.deadline.set(deadline - loop.time(), connection.expire)
            try:
                result = await answer
            except NodeGone:
                if reused and not connection.received:  # closed while idle: not the node's failure
                    continue
                raise
            except BaseException:  # cancelled, timed out: its answer, if any comes, is nobody's
                if connection.open:
                    connection.transport.abort()
                raise
            finally:
                connection.deadline.clear()
            if connection.open:
                if len(self._idle) < MAX_IDLE:
                    self._idle.append(connection)
                else:
                    connection.transport.close()
            return result

    def _kept(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.open:
                return connection
        return None

    async def _connect(self, deadline: float) -> _Connection:
        async with asyncio.timeout_at(deadline):  # (outside: TimeoutError is an OSError)
            loop = asyncio.get_running_loop()
            try:
                if self._local is None:
                    _, connection = await loop.create_connection(_Connection, self._host, self._port)
                else:
                    _, connection = await loop.create_unix_connection(_Connection, "\0" + self._local)
            except OSError as exc:
                raise NodeGone(f"cannot connect to {self.address}: {exc.strerror or exc}") from None
        return connection

    def close(self) -> None:
        for connection in self._idle:
            if connection.open:
                connection.transport.close()
        self._idle.clear()
