"""llhttp's side of a connection (`edge.Connection`), through httptools: it is fed a request's head
up to its blank line, so that a body of known length can then be read past it (`past_head`), and
whatever else a read holds; it bounds a head's lines and hands the connection what it parses."""

from __future__ import annotations

import httptools

from atoll.http.messages import HttpRequest
from atoll.http.receiving import STOPPED
from atoll.kserve.errors import ApiError

MAX_LINE = 8190  # a request line or a header line, as aiohttp and most servers bound them
MAX_HEAD = 64 * 1024
PREFACE = "HTTP/2 (PRI) is not served on this port: HTTP/1.1 here, gRPC on the gRPC port"


class RequestParser:
    """Parses what `connection` reads: tells it `began()`, `headed(request)` (routed, its body to
    come), `chunk(bytes)` of a body llhttp reads, `parsed(keep_alive)` once a request is whole,
    `malformed(reason)` for what llhttp or the bounds refuse, and `upgraded()` after a request
    asking to upgrade. It hands nothing over once the connection has `STOPPED` parsing."""

    def __init__(self, connection):
        self._connection = connection
        self._parser = httptools.HttpRequestParser(self)
        self._url: list[bytes] = []
        self._headers: dict[str, str] = {}
        self.head_bytes = 0  # of the request being parsed, fed while in its head

    def feed(self, start: int, stop: int, in_head: bool) -> int:
        """Feed llhttp what was read into the server's buffer from `start`: up to the end of a head
        (`in_head`: the next bytes are in one), else up to `stop`; where it stopped."""
        server = self._connection.server
        end = server.raw.find(b"\r\n\r\n", start, stop) if in_head else -1
        cut = stop if end < 0 else end + 4
        if in_head:
            self.head_bytes += cut - start
        try:
            self._parser.feed_data(server.buffer[start:cut])
        except httptools.HttpParserUpgrade:  # after a whole request asking to upgrade (h2c, websocket)
            self._connection.upgraded()
        except httptools.HttpParserError as exc:  # llhttp stops at HTTP/2's preface too
            self._connection.malformed(PREFACE if "PRI" in str(exc) else str(exc))
        return cut

    def past_head(self) -> bool:
        """The head parsed last ended where llhttp was stopped: its body is read past it, and a
        fresh parser reads the next request. Whether the client keeps the connection."""
        keep_alive = self._parser.should_keep_alive()
        self._parser = httptools.HttpRequestParser(self)
        self.head_bytes = 0
        return keep_alive

    # -- httptools' callbacks -----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._connection.state not in STOPPED:
            self._url.clear()
            self._headers = {}
            self._connection.began()

    def on_url(self, piece: bytes) -> None:
        self._url.append(piece)
        if sum(map(len, self._url)) > MAX_LINE:
            self._connection.malformed(f"request target over {MAX_LINE} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) + len(value) > MAX_LINE:
            self._connection.malformed(f"header line over {MAX_LINE} bytes")
            return
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self._headers[key] = f"{self._headers[key]}, {text}" if key in self._headers else text

    def on_headers_complete(self) -> None:
        connection = self._connection
        if connection.state in STOPPED:
            return
        path, query = _target(b"".join(self._url))
        request = HttpRequest(self._parser.get_method().decode("latin-1"), path, query, self._headers, connection)
        try:
            request.handler = connection.server.routes.resolve(request)
        except ApiError as exc:  # no route: answered once the body is read
            request.handler = exc
        connection.headed(request)

    def on_body(self, chunk: bytes) -> None:
        if self._connection.state not in STOPPED:
            self._connection.chunk(chunk)

    def on_message_complete(self) -> None:
        if self._connection.state not in STOPPED:
            self.head_bytes = 0
            self._connection.parsed(self._parser.should_keep_alive())


def _target(raw: bytes) -> tuple[str, str]:
    """The path and query of a request target, of its absolute form too."""
    if not raw.startswith(b"/") and b"://" in raw:
        parsed = httptools.parse_url(raw)
        raw = (parsed.path or b"/") + (b"?" + parsed.query if parsed.query else b"")
    path, _, query = raw.decode("latin-1").partition("?")
    return path, query
