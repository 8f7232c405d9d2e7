"""The HTTP edge of a front end (and of the supervisor's metrics port): HTTP/1.1 connections parsed
by httptools (llhttp, Node.js's parser), each request's body read within bounds before its handler
runs, and every error answered as Triton answers errors, `{"error": "..."}` with its kind's status.

Why not aiohttp, which served here before: under overload most requests are refused, and a refusal
must cost next to nothing or the refusals eat the capacity they protect. `tools/protocol_floor.py`
(2-core VM, closed loop, the server's heap settings) measures a route that only reads the body at
0.032 CPU-ms a request for 110 KB here and 0.042 on aiohttp (602 KB: 0.075 and 0.105), and Atoll's
whole refusal of a JPEG infer request at 0.043 here (answered from its JSON header, `Connection.
_answered_early`) against 0.145 on aiohttp. What makes the
difference: reads go into one reused buffer (aiohttp allocated 256 KB per read); a request's first
read is at most `HEAD_READ`, and a body of known length is then read by the kernel straight into
its place, not copied out of the parser and joined, or, answered early, discarded by the kernel
(MSG_TRUNC); the loop is woken once such a body has arrived whole (SO_RCVLOWAT), not at each
segment; one timer a connection, re-armed lazily; routes matched by segment count and last
segment. Around that bare protocol, what a server needs:

- A body is read whole before its request counts as pending (a client sending it slowly holds only
  its own connection): at most `max_bytes` of it after any Content-Encoding is undone (413 beyond),
  within `timeout_s` of the request's first byte (408), and one that cannot be decoded (garbage
  labelled gzip) is a 400. A request head is at most 8,190 bytes a line and 64 KiB in all.
- All the bodies a front end holds at once, being read or read and not yet answered, stay within
  its `BodyBudget`: past it the largest body still arriving is cut off, or this one refused (503
  with Retry-After).
- What the parser refuses (a bad request line, method, Content-Length or chunk size; an HTTP/2
  preface) is a 400 logged at INFO at most every 10 s: it is the client's fault, and a client can
  send garbage as fast as it likes. An exception nobody expected is logged and answered 500.
- Pipelined requests are answered in order; a client that goes away cancels its request in hand; a
  client that half-closes after a whole request is answered, then the connection closed. After a
  refusal mid-body, what the client still sends is read and dropped for `LINGER_S` so that it gets
  the answer rather than a reset. A connection with no request is closed after `idle_timeout_s`.
- 503s go out at `pace`'s rate (`refusal_pace`): one past it waits its turn (up to a second), so a
  client that resends a refused request at once cannot keep the loop from the work it admitted.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque

import httptools

from atoll.http.bodies import BodyError, BodyLimits, content_length, decoded, too_large
from atoll.http.messages import HttpRequest, HttpResponse, MethodNotAllowed, Routes, api_error, error
from atoll.http.refusal_pace import RefusalPace
from atoll.kserve.errors import ApiError, ErrorCode
from atoll.observe.throttled import Throttled

log = logging.getLogger("atoll.front_end.http_routes")
_gone = Throttled(log)  # connections closed mid-request: a client can repeat that at will
_refusals = Throttled(log)  # malformed requests

MAX_LINE = 8190  # a request line or a header line, as aiohttp and most servers bound them
MAX_HEAD = 64 * 1024
MAX_QUEUED = 16  # whole requests waiting behind the one in hand before the connection stops reading
LINGER_S = 2.0
READ_BUFFER = 256 * 1024
# A request's first read: its head and, for a binary-extension infer request, its JSON header.
# The body is then read straight into its place, or, answered early, discarded in the kernel
# (`Connection._discard`): a 110 KB JPEG request read whole into the shared buffer would copy
# its body there and then again into its place, or, refused, copy it only to drop it.
HEAD_READ = 8 * 1024


class HttpServer:
    """Serves `routes` on the sockets `listen` opens; `connections` (`connections.HttpConnections`)
    bounds the connections it holds, and `pace` (None: unpaced) the rate of its 503s."""

    def __init__(self, routes: Routes, limits: BodyLimits, connections, idle_timeout_s: float = 300.0,
                 pace: RefusalPace | None = None):
        self.routes = routes
        self.limits = limits
        self.connections = connections
        self.idle_timeout_s = idle_timeout_s
        self.pace = pace
        # Every connection of this loop reads into this one buffer: each read is parsed before the next.
        self.raw = bytearray(READ_BUFFER)
        self.buffer = memoryview(self.raw)
        self.head_buffer = self.buffer[:HEAD_READ]
        self.drop_buffer = self.buffer[:1]  # a body being dropped: its first byte, to wake `_discard`
        self._listeners: list[asyncio.Server] = []

    async def listen(self, host: str, port: int, backlog: int = 100, reuse_port: bool = False) -> asyncio.Server:
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(lambda: Connection(self), host, port, reuse_port=reuse_port,
                                            backlog=backlog)  # fmt: skip
        self._listeners.append(listener)
        return listener

    async def shutdown(self, timeout_s: float) -> None:
        """Accept no more; answer the requests in hand (for up to `timeout_s`), then close every
        connection."""
        for listener in self._listeners:
            listener.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while any(c.holds_request for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for connection in list(self.connections):
            connection.abort()

    async def answer(self, request: HttpRequest) -> HttpResponse:
        """The handler's answer, or the error's; raises only CancelledError (the client went away)."""
        try:
            if isinstance(request.handler, ApiError):  # no route: answered once the body is read
                raise request.handler
            return await request.handler(request)
        except MethodNotAllowed as exc:
            return exc.response()
        except ApiError as exc:
            return api_error(exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: logged with its traceback, answered without one
            log.exception("%s %s failed", request.method, request.path)
            return error(500, f"internal error ({type(exc).__name__})")


IDLE, HEAD, BODY = range(3)  # where a connection is in the request it is receiving


class Connection(asyncio.BufferedProtocol):
    """One client connection: parses requests as they arrive, answers them in order."""

    def __init__(self, server: HttpServer):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.state = IDLE
        self._parser = httptools.HttpRequestParser(self)
        self._url: list[bytes] = []
        self._headers: dict[str, str] = {}
        self._head_bytes = 0
        self._request: HttpRequest | None = None  # the one arriving
        self._chunks: list[bytes] = []
        self._size = 0
        self._body: bytearray | None = None  # a body of known length read past the parser, being filled
        self._filled = 0
        self._direct: int | None = None  # the length of a body to read so, once its head is parsed
        self._parsed_body = False  # the parser went on past the head (its blank line straddled two reads)
        self._keep_alive = True
        self._dropping = 0  # bytes still to come of a body answered early
        self._socket = None  # to set SO_RCVLOWAT on (`_wake_at`) and discard with (`_discard`)
        self._lowat = 1
        self._refused = False  # stop parsing: the last answer is queued
        # (HttpRequest, keep_alive) to answer, or (HttpResponse, keep_alive) answered already: early
        # (keep_alive), or a refusal after which the connection closes (not keep_alive)
        self._queue: deque = deque()
        self._task: asyncio.Task | None = None
        # One timer a connection, re-armed only when it fires before the deadline now in force
        # (two timers set and cancelled per request cost a refusal ~10 % more).
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._on_deadline = None  # what happens at `_deadline`: close, or answer 408
        self._eof = False  # the client half-closed after whole requests
        self._paused = False
        self._drained: asyncio.Future | None = None  # while the transport's write buffer is full

    @property
    def holds_request(self) -> bool:
        """A whole request in hand or waiting: the connection is not closed to make room."""
        return self._task is not None or bool(self._queue)

    # -- asyncio's side -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self._socket = transport.get_extra_info("socket")
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._until(self.server.idle_timeout_s, self.close)
        self.server.connections.add(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:  # the kernel copies the rest of a body straight to its place
            return memoryview(self._body)[self._filled:]
        if self._dropping and not self._refused and self._socket is not None:
            return self.server.drop_buffer
        if self._refused or self.state == BODY:
            return self.server.buffer
        return self.server.head_buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self._refused:  # lingering: what the client still sends is dropped
            return
        if self._body is not None:
            self._filled += nbytes
            if self._filled == len(self._body):
                self._body_read()
            else:  # a short read: wake for what is left (the bound was set for more)
                self._wake_at(len(self._body) - self._filled)
            return
        self._parse(0, nbytes)
        if self._dropping:
            self._discard()

    def _parse(self, start: int, stop: int) -> None:
        """Parse what was read into the shared buffer, `[start, stop)`. The parser is fed a request's
        head on its own, so that a body of known length can then be read without it (`_body`): one
        copy, kernel to body, where llhttp's `on_body` would add a copy and a join. Chunked bodies,
        and a head whose blank line straddles two reads, go through the parser."""
        raw, view = self.server.raw, self.server.buffer
        while start < stop and not self._refused:
            if self._dropping:  # the body of a request answered early
                take = min(stop - start, self._dropping)
                start += take
                self._dropped(take)
                continue
            if self._body is not None:  # the start of a body whose head ended in this read
                take = min(stop - start, len(self._body) - self._filled)
                self._body[self._filled:self._filled + take] = view[start:start + take]
                self._filled += take
                start += take
                if self._filled == len(self._body):
                    self._body_read()
                continue
            end = raw.find(b"\r\n\r\n", start, stop) if self.state != BODY else -1
            cut = stop if end < 0 else end + 4
            if self.state != BODY:
                self._head_bytes += cut - start
            self._direct = None
            self._parsed_body = False
            try:
                self._parser.feed_data(view[start:cut])
            except httptools.HttpParserUpgrade:  # after a whole request asking to upgrade (h2c, websocket)
                self._refused = True  # it is answered as HTTP/1.1, then the connection closes
                self._eof = True
            except httptools.HttpParserError as exc:
                if "PRI" in str(exc):  # llhttp stops at HTTP/2's preface
                    self._malformed("HTTP/2 (PRI) is not served on this port: HTTP/1.1 here, gRPC on the gRPC port")
                else:
                    self._malformed(str(exc))
            start = cut
            if self.state == HEAD and self._head_bytes > MAX_HEAD and not self._refused:
                self._malformed(f"request head over {MAX_HEAD} bytes")
            elif self._direct is not None and not self._parsed_body and not self._refused:
                # the head ended exactly here: the body is read past the parser, which a fresh one replaces
                self._keep_alive = self._parser.should_keep_alive()
                self._parser = httptools.HttpRequestParser(self)
                if self._answered_early(view[start:min(stop, start + self._direct)]):
                    self._dropping = self._direct
                    continue
                self._body, self._filled = bytearray(self._direct), 0
                if stop - start < len(self._body):  # more to come than this read holds
                    self._wake_at(len(self._body) - min(stop - start, len(self._body)))

    def _discard(self) -> None:
        """Drop what has arrived of a body answered early without copying it out of the kernel
        (MSG_TRUNC: a refusal under overload then never touches the 110 KB it refuses), and have
        the loop woken once the rest is here."""
        raw = self._socket
        if raw is not None:  # the transport's descriptor, borrowed for one call: detached, never closed here
            sock = socket.socket(raw.family, raw.type, raw.proto, raw.fileno())
            try:
                self._dropped(sock.recv_into(self.server.buffer, min(self._dropping, READ_BUFFER),
                                             socket.MSG_TRUNC | socket.MSG_DONTWAIT))  # fmt: skip
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:  # the connection failed: the transport hears of it too
                return
            finally:
                sock.detach()
        if self._dropping:
            self._wake_at(self._dropping)

    def _dropped(self, nbytes: int) -> None:
        self._dropping -= nbytes
        if not self._dropping:
            self.state = IDLE
            self._head_bytes = 0
            if self._lowat > 1:
                self._wake_at(1)
            if self._task is None and not self._queue:
                self._until(self.server.idle_timeout_s, self.close)

    def eof_received(self) -> bool | None:
        """The client shut its sending side. After whole requests (a half-close, as `nc -N` and
        some HTTP/1.0 tools do) they are answered, then the connection closed, as Triton does;
        idle, or with a request cut short, there is nothing to answer."""
        if self.state == IDLE and self.holds_request:
            self._eof = True
            return True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._on_deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.server.connections.discard(self)
        if self._request is not None:  # mid-request: nobody to answer
            if not self._refused:
                _gone.info("%s: the connection closed mid-request (the client went away, or its body was cut off for "
                           "room; at most one such line every 10 s)", self.peer)  # fmt: skip
            self._release(self._request)
            self._request = None
        if self._task is not None:
            self._task.cancel()
        for item, _ in self._queue:
            if isinstance(item, HttpRequest):
                self._release(item)
        self._queue.clear()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close at once, dropping what is unsent (a connection cut off for room, or at shutdown)."""
        if self.transport is not None:
            self.transport.abort()

    # -- httptools' callbacks -----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._refused:
            return
        self.state = HEAD
        self._url.clear()
        self._headers = {}
        self._chunks = []
        self._size = 0
        if self._task is None and not self._queue:
            self._until(self.server.limits.timeout_s, self._late)

    def on_url(self, piece: bytes) -> None:
        if self._refused:
            return
        self._url.append(piece)
        if sum(map(len, self._url)) > MAX_LINE:
            self._malformed(f"request target over {MAX_LINE} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused:
            return
        if len(name) + len(value) > MAX_LINE:
            self._malformed(f"header line over {MAX_LINE} bytes")
            return
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self._headers[key] = f"{self._headers[key]}, {text}" if key in self._headers else text

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        raw = b"".join(self._url)
        if not raw.startswith(b"/") and b"://" in raw:  # the absolute form: its path and query
            parsed = httptools.parse_url(raw)
            raw = (parsed.path or b"/") + (b"?" + parsed.query if parsed.query else b"")
        path, _, query = raw.decode("latin-1").partition("?")
        request = HttpRequest(self._parser.get_method().decode("latin-1"), path, query, self._headers, self)
        try:
            request.handler = self.server.routes.resolve(request)
        except ApiError as exc:
            request.handler = exc
        self._request = request
        self.state = BODY
        limits = self.server.limits
        try:
            length = content_length(request.headers)
            if length is not None and length > limits.max_bytes:  # on the wire, as decoded (`decoded`)
                raise too_large(limits.max_bytes)
            if length and limits.budget is not None:  # counted whole before it arrives
                limits.budget.take(request, length)
        except BodyError as exc:
            self._refuse(exc)
            return
        if request.headers.get("expect", "").lower() == "100-continue" and self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if length and "transfer-encoding" not in request.headers:
            self._direct = length  # `_parse` reads it past the parser if the head ended where it cut

    def on_body(self, chunk: bytes) -> None:
        request = self._request
        self._parsed_body = True
        if self._refused or request is None:
            return
        self._size += len(chunk)
        limits = self.server.limits
        try:
            if self._size > limits.max_bytes:
                raise too_large(limits.max_bytes)
            if limits.budget is not None and "content-length" not in request.headers:
                limits.budget.take(request, len(chunk))  # chunked: counted as it arrives
        except BodyError as exc:
            self._refuse(exc)
            return
        self._chunks.append(chunk)

    def on_message_complete(self) -> None:
        self._parsed_body = True
        if self._refused or self._request is None:
            return
        body = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks = []
        self._complete(body, self._parser.should_keep_alive())

    def _wake_at(self, nbytes: int) -> None:
        """Have the loop woken for this socket once `nbytes` have arrived (SO_RCVLOWAT; the kernel
        caps it at half its largest receive buffer): a 110 KB body arrives in two or three
        segments, and on a busy core each wake-up is a context switch."""
        if self._socket is not None and (nbytes > 1 or self._lowat > 1):
            try:
                self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, nbytes)
                self._lowat = nbytes
            except OSError:  # not a TCP socket, or the kernel refuses: woken at every segment, as before
                self._socket = None

    def _answered_early(self, prefix: memoryview) -> bool:
        """Whether the request's route answered it from its head and `prefix`, the first bytes of
        its body (`messages.Early`): a refusal under overload then costs neither the rest of
        the body's copy nor a task, and what is left of the body is dropped as it arrives."""
        request = self._request
        if request.early is None or not self._keep_alive:
            return False
        response = request.early(request, prefix)
        if response is None:
            return False
        self._request = None
        self._release(request)
        self._until(self.server.limits.timeout_s, self.close)  # the rest must come, but it has had its answer
        if self._task is None and not self._queue and self._goes_now(response):
            self._write(response, True, request.method != "HEAD")
        else:  # after the answers to the requests before it, or at its turn
            self._queue.append((response, True))
            if self._task is None:
                self._task = asyncio.get_running_loop().create_task(self._run())
        return True

    def _body_read(self) -> None:
        if self._lowat > 1:
            self._wake_at(1)
        body, self._body = self._body, None
        self._complete(body, self._keep_alive)

    def _complete(self, body: bytes | bytearray, keep_alive: bool) -> None:
        request, self._request = self._request, None
        self.state = IDLE
        self._head_bytes = 0
        encoding = request.headers.get("content-encoding", "identity").lower()
        if encoding != "identity" and body:
            try:
                body = decoded(body, encoding, self.server.limits.max_bytes)
            except BodyError as exc:
                self._release(request)
                self._refuse(exc)
                return
        request.body = body
        if self.server.limits.budget is not None:
            self.server.limits.budget.arrived(request)
        self._queue.append((request, keep_alive))
        if len(self._queue) >= MAX_QUEUED and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        if self._task is None:
            self._on_deadline = None
            self._task = asyncio.get_running_loop().create_task(self._run())

    # -- answers ------------------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while self._queue:
                item, keep_alive = self._queue.popleft()
                if self._paused and len(self._queue) < MAX_QUEUED // 2 and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                if isinstance(item, HttpResponse):  # answered early, or a refusal: then the last
                    await self._turn(item)
                    self._write(item, keep_alive, True)
                    if not keep_alive:
                        self._linger()
                        return
                    continue
                request = item
                try:
                    response = await self.server.answer(request)
                finally:
                    self._release(request)
                await self._turn(response)
                if not self._open:
                    return
                keep_alive = keep_alive and not (self._eof and not self._queue)
                self._write(response, keep_alive, request.method != "HEAD")
                if not keep_alive:
                    self.close()
                    return
                if self._drained is not None:
                    await self._drained
        finally:
            self._task = None
        if self._open and self.state == IDLE:
            self._until(self.server.idle_timeout_s, self.close)
        elif self._open:  # the next request has begun (or the rest of one answered early): its time counts from now
            self._until(self.server.limits.timeout_s, self.close if self._dropping else self._late)

    def _goes_now(self, response: HttpResponse) -> bool:
        """Whether `response` may be sent at once: anything but a 503 may, a 503 within the pace."""
        pace = self.server.pace
        return pace is None or response.status != 503 or pace.free(asyncio.get_running_loop().time())

    async def _turn(self, response: HttpResponse) -> None:
        """Wait until `response` may be sent (`refusal_pace`)."""
        if self.server.pace is not None and response.status == 503:
            await self.server.pace.turn()

    @property
    def _open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def _write(self, response: HttpResponse, keep_alive: bool, with_body: bool) -> None:
        if self._open:
            self.transport.write(response.encode(keep_alive, with_body))

    def _refuse(self, exc: ApiError) -> None:
        """Answer `exc` after what is in hand, then close: what is left of this request is not read."""
        self._refused = True
        self._on_deadline = None
        self._body = None
        if self._lowat > 1:  # what still comes is dropped as it comes
            self._wake_at(1)
        if self._request is not None:
            self._release(self._request)
            self._request = None
        self._queue.append((api_error(exc), False))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def _malformed(self, reason: str) -> None:
        if self._refused:
            return
        _refusals.info("malformed HTTP request from %s answered 400: %s", self.peer, reason)
        self._refuse(BodyError(ErrorCode.INVALID_ARG, reason))

    def _late(self) -> None:
        self._refuse(BodyError(ErrorCode.BODY_TIMEOUT, f"the request body did not arrive within "
                                                       f"{self.server.limits.timeout_s:g} s"))  # fmt: skip

    def _linger(self) -> None:
        """After the last answer: stop sending, drop what still arrives, close when the client does
        or after `LINGER_S`."""
        if not self._open:
            return
        if self.state == IDLE:  # nothing of a request is still on its way
            self.close()
            return
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._until(LINGER_S, self.close)

    def _release(self, request: HttpRequest) -> None:
        if self.server.limits.budget is not None:
            self.server.limits.budget.release(request)

    def _until(self, delay: float, action) -> None:
        """`action` in `delay` seconds, unless another deadline is set first."""
        loop = asyncio.get_running_loop()
        self._deadline, self._on_deadline = loop.time() + delay, action
        if self._timer is None or self._timer.when() > self._deadline:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(self._deadline, self._expired)

    def _expired(self) -> None:
        self._timer = None
        if self._on_deadline is None or self.transport is None:
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._deadline:  # a later deadline replaced the one this timer was set for
            self._timer = loop.call_at(self._deadline, self._expired)
            return
        action, self._on_deadline = self._on_deadline, None
        action()
