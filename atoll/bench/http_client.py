"""A lean keep-alive HTTP/1.1 client for the load processes: pre-encoded requests out, status codes in.

A load generator shares the machine with the server it measures, so every microsecond it spends per
request is taken from the server (perf_analyzer is C++ for this reason): this one writes bytes
encoded once, parses only the status line and framing headers, and drops the answer's body as it
arrives (its cost against aiohttp's: docs/benchmarks.md). One request at a time per connection;
connections are kept alive and reused, a new one opened when none is idle, up to `max_connections`,
beyond which a request waits for one (its wait counts towards the timeout). Answers are framed by
Content-Length, chunked transfer coding, or the end of the connection.
"""

from __future__ import annotations

import asyncio
from collections import deque
from urllib.parse import urlsplit


class ConnectionLost(Exception):
    """The connection failed or closed before the whole answer came."""


class _Answer:
    """The framing state of one answer: headers first, then a body of a known length, chunks, or
    everything until the connection ends."""

    __slots__ = ("status", "remaining", "chunked", "until_close", "keep_alive")

    def __init__(self, head: bytes):
        lines = head.split(b"\r\n")
        try:
            self.status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise ConnectionLost(f"not an HTTP status line: {lines[0][:80]!r}") from None
        self.remaining = -1
        self.chunked = self.until_close = False
        self.keep_alive = not lines[0].startswith(b"HTTP/1.0")
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                self.remaining = int(value)
            elif name == b"transfer-encoding":
                self.chunked = b"chunked" in value.lower()
            elif name == b"connection":
                self.keep_alive = value.strip().lower() == b"keep-alive"
        if self.chunked:
            self.remaining = -1
        elif self.remaining < 0:
            self.until_close, self.keep_alive = True, False


class _Connection(asyncio.Protocol):
    def __init__(self, client: HttpClient):
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.answer: _Answer | None = None
        self.waiter: asyncio.Future | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def send(self, request: bytes) -> asyncio.Future:
        self.waiter = self.client.loop.create_future()
        self.transport.write(request)
        return self.waiter

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # an answer nobody asked for: the connection is out of step
            self.transport.close()
            return
        self.buffer += data
        try:
            self._parse()
        except (ConnectionLost, ValueError) as e:
            self.fail(ConnectionLost(str(e)))

    def _parse(self) -> None:
        while self.waiter is not None:
            if self.answer is None:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                self.answer = _Answer(bytes(self.buffer[:end]))
                del self.buffer[: end + 4]
            answer = self.answer
            if answer.until_close:
                self.buffer.clear()
                return
            if answer.chunked and answer.remaining < 0:
                end = self.buffer.find(b"\r\n")
                if end < 0:
                    return
                size = int(bytes(self.buffer[:end]).split(b";")[0], 16)
                del self.buffer[: end + 2]
                # a chunk, then its CRLF; the last (empty) chunk's CRLF ends the answer (no trailers)
                answer.remaining = size + 2
                if size == 0:
                    answer.chunked = False
            if len(self.buffer) < answer.remaining:
                answer.remaining -= len(self.buffer)
                self.buffer.clear()
                return
            del self.buffer[: answer.remaining]
            if answer.chunked:
                answer.remaining = -1
                continue
            self._done(answer)

    def _done(self, answer: _Answer) -> None:
        waiter, self.waiter, self.answer = self.waiter, None, None
        if not waiter.done():
            waiter.set_result(answer.status)
        if answer.keep_alive and not self.buffer:
            self.client.idle.append(self)
            self.client.wake()
        else:
            self.transport.close()

    def fail(self, error: Exception) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        self.transport.close()

    def eof_received(self) -> bool:
        if self.answer is not None and self.answer.until_close:
            self._done(self.answer)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.connections.discard(self)
        if self in self.client.idle:
            self.client.idle.remove(self)
        if self.waiter is not None:
            self.fail(ConnectionLost(str(exc or "closed by the server")))
        self.client.wake()


class HttpClient:
    """POSTs of pre-encoded requests to one server; `request()` encodes one, `send()` returns the
    answer's status, raising TimeoutError after `timeout_s` or ConnectionLost."""

    def __init__(self, url: str, timeout_s: float, max_connections: int = 4096):
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the load processes speak plain http://host:port, not {url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.authority = parts.netloc
        self.timeout_s = timeout_s
        self.loop = asyncio.get_running_loop()
        self.max_connections = max_connections
        self.idle: list[_Connection] = []
        self.connections: set[_Connection] = set()
        self._opening = 0
        self._waiting: deque[asyncio.Future] = deque()  # requests waiting for a connection, in order

    def request(self, path: str, body: bytes, headers: dict[str, str]) -> bytes:
        head = [f"POST {path} HTTP/1.1", f"Host: {self.authority}", f"Content-Length: {len(body)}",
                *(f"{k}: {v}" for k, v in headers.items())]  # fmt: skip
        return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body

    async def send(self, request: bytes) -> int:
        deadline = self.loop.time() + self.timeout_s
        conn = self.idle.pop() if self.idle else await self._connection(deadline)
        waiter = conn.send(request)
        timer = self.loop.call_at(deadline, self._expire, conn, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()

    async def _connection(self, deadline: float) -> _Connection:
        """An idle connection, or a new one while there is room; else wait for either."""
        async with asyncio.timeout_at(deadline):
            while not self.idle and len(self.connections) + self._opening >= self.max_connections:
                woken = self.loop.create_future()
                self._waiting.append(woken)
                await woken
            if self.idle:
                return self.idle.pop()
            self._opening += 1
            try:
                _, conn = await self.loop.create_connection(lambda: _Connection(self), self.host, self.port)
            finally:
                self._opening -= 1
        self.connections.add(conn)
        return conn

    def wake(self) -> None:
        """A connection went idle or closed: the first request waiting for one looks again."""
        while self._waiting:
            woken = self._waiting.popleft()
            if not woken.done():
                woken.set_result(None)
                return

    @staticmethod
    def _expire(conn: _Connection, waiter: asyncio.Future) -> None:
        if conn.waiter is waiter:
            conn.fail(TimeoutError())

    def close(self) -> None:
        for conn in list(self.connections):
            conn.transport.close()
        self.idle.clear()
