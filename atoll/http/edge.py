"""The HTTP edge of a front end (and of the supervisor's metrics port): HTTP/1.1 connections parsed
by httptools (llhttp), each request's body read within bounds before its handler runs, and every
error answered as Triton answers errors, `{"error": "..."}` with its kind's status.

It serves in aiohttp's place because under overload most requests are refused, and a refusal must
cost next to nothing: reads share one buffer, a request's first read is at most `HEAD_READ`, and a
body is then read by the kernel into its place or, answered early, dropped in the kernel
(`body_reader`). What the edge bounds and how it answers, and its measurements: docs/http-edge.md.
"""
from __future__ import annotations

import asyncio
import logging
import socket

from atoll.http.answers import Answers
from atoll.http.bodies import BodyError, BodyLimits
from atoll.http.body_reader import BodyReader
from atoll.http.deadline import Deadline
from atoll.http.messages import HttpRequest, HttpResponse, MethodNotAllowed, Routes, api_error, error
from atoll.http.receiving import (BODY, BODY_ARRIVING, DROPPING, ENDED, HEAD, IDLE, PLACING, REFUSED, REFUSED_IN_BODY,
                                  SIZED, STOPPED)
from atoll.http.refusal_pace import RefusalPace
from atoll.http.request_parser import MAX_HEAD, RequestParser
from atoll.kserve.errors import INTERNAL_ERROR, ApiError, ErrorCode
from atoll.observe.throttled import Throttled

log = logging.getLogger(__name__)
_gone = Throttled(log)  # connections closed mid-request: a client can repeat that at will
_refusals = Throttled(log)  # malformed requests

LINGER_S = 2.0  # after a refusal mid-request, what still comes is dropped so the client reads the answer
READ_BUFFER = 256 * 1024
# A request's first read: its head and, for a binary-extension infer request, its JSON header; the
# body is then placed or dropped by the kernel (`body_reader`), never copied through the shared buffer.
HEAD_READ = 8 * 1024
# The body's first bytes a route's early answer reads at least (a JSON infer request's inputs' fields,
# a binary one's JSON header), where the head's read held fewer: clients send the head on its own.
EARLY_BYTES = 4 * 1024


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
        self.drop_buffer = self.buffer[:1]  # a body being dropped: its first byte, to wake `BodyReader.discard`
        self._listeners: list[asyncio.Server] = []
        self._adopting: set[asyncio.Task] = set()

    async def listen(self, host: str, port: int, backlog: int = 100, reuse_port: bool = False) -> asyncio.Server:
        return await self._serve(host=host, port=port, reuse_port=reuse_port, backlog=backlog)

    async def listen_on(self, sock: socket.socket) -> asyncio.Server:
        """Serve the connections of `sock`, listening already (a server's local socket)."""
        return await self._serve(sock=sock)

    async def _serve(self, **where) -> asyncio.Server:
        listener = await asyncio.get_running_loop().create_server(lambda: Connection(self), **where)
        self._listeners.append(listener)
        return listener

    def adopt(self, sock: socket.socket, prefix: bytes) -> None:
        """Serve a connection accepted elsewhere (the cluster endpoint's native relay), whose first
        `prefix` bytes were read there: they are taken before anything the socket brings."""
        loop = asyncio.get_running_loop()
        task = loop.create_task(loop.connect_accepted_socket(lambda: Connection(self, prefix), sock))
        self._adopting.add(task)
        task.add_done_callback(self._adopted)

    def _adopted(self, task: asyncio.Task) -> None:
        self._adopting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("a connection handed on by the relay could not be served: %s", task.exception())

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
            return error(500, INTERNAL_ERROR)


class Connection(asyncio.BufferedProtocol):
    """One client connection: parses requests as they arrive (`RequestParser`), reads their bodies
    (`BodyReader`) and answers them in order (`Answers`), on one timer (`Deadline`). `state`
    (`Receiving`) is where it is; only its own methods change it."""

    def __init__(self, server: HttpServer, prefix: bytes = b""):
        self.server = server
        self._prefix = prefix  # read elsewhere before the connection came here (`HttpServer.adopt`)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.state = IDLE
        self._request: HttpRequest | None = None  # the one arriving
        self._requests = RequestParser(self)
        self._body = BodyReader(server.limits)
        self._answers = Answers(self)
        self._deadline = Deadline(asyncio.get_running_loop())

    @property
    def holds_request(self) -> bool:
        """A whole request in hand or waiting: the connection is not closed to make room."""
        return self._answers.busy

    @property
    def receiving_body(self) -> bool:
        """A request's body is on its way (closed to make room after connections that have none)."""
        return self.state in BODY_ARRIVING

    @property
    def ended(self) -> bool:
        """The client sends no more requests: the answer to its last closes the connection."""
        return self.state is ENDED

    @property
    def open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    # -- asyncio's side -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self._body.sock = transport.get_extra_info("socket")
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._deadline.set(self.server.idle_timeout_s, self.close)
        if self._prefix:  # listed once it is taken: what was read counts (a head, a body arriving), not idle
            self._take(self._prefix)
            self._prefix = b""
        self.server.connections.add(self)

    def _take(self, data: bytes) -> None:
        """Take `data` as if it had been read from the socket (the prefix of an adopted connection).
        Bodies are copied through, not dropped in the kernel, since these bytes come first."""
        sock, self._body.sock = self._body.sock, None
        view = memoryview(data)
        try:
            while view and self.transport is not None and self.state not in STOPPED:
                buffer = self.get_buffer(len(view))
                n = min(len(buffer), len(view))
                buffer[:n] = view[:n]
                view = view[n:]
                self.buffer_updated(n)
        finally:
            self._body.sock = sock

    def get_buffer(self, sizehint: int) -> memoryview:
        state = self.state
        if state is PLACING:  # the kernel copies the rest of a body straight to its place
            return self._body.space()
        if state is DROPPING and self._body.discards:  # its first byte, to wake `BodyReader.discard`
            return self.server.drop_buffer
        return self.server.head_buffer if state is IDLE or state is HEAD else self.server.buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self.state is PLACING:
            if self._body.filled(nbytes):
                self._complete(self._body.placed())
            elif (prefix := self._body.early_due()) is not None:
                if (response := self._early(prefix)) is None:
                    self._body.place_rest()
                else:
                    self._body.drop_rest()
                    self._answer_early(response)
        elif self.state not in STOPPED:  # (else: lingering, what the client still sends is dropped)
            self._parse(0, nbytes)
            if self.state is DROPPING and self._body.discard(self.server.buffer):
                self._dropped()

    def eof_received(self) -> bool | None:
        """The client shut its sending side. After whole requests (a half-close, as `nc -N` and
        some HTTP/1.0 tools do) they are answered, then the connection closed, as Triton does;
        idle, or with a request cut short, there is nothing to answer."""
        if (self.state is IDLE or self.state is ENDED) and self._answers.busy:
            self.state = ENDED
            return True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._deadline.stop()
        self.server.connections.discard(self)
        if self._request is not None:  # mid-request: nobody to answer
            _gone.info("%s: the connection closed mid-request (the client went away, or its body was cut off for "
                       "room; at most one such line every 10 s)", self.peer)  # fmt: skip
            self.server.limits.release(self._request)
            self._request = None
        self._answers.cancel()

    def pause_writing(self) -> None:
        self._answers.pause_writing()

    def resume_writing(self) -> None:
        self._answers.resume_writing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close at once, dropping what is unsent (a connection cut off for room, or at shutdown)."""
        if self.transport is not None:
            self.transport.abort()

    # -- what was read ------------------------------------------------------------------------------

    def _parse(self, start: int, stop: int) -> None:
        """Take what was read into the server's buffer, `[start, stop)`: the parser is fed heads on
        their own, and the bodies it reads; a body of known length is placed or dropped past it."""
        while start < stop:
            state = self.state
            if state is DROPPING:  # the body of a request answered early
                take = min(stop - start, self._body.left)
                start += take
                if self._body.dropped(take):
                    self._dropped()
            elif state is PLACING:  # the start of a body whose head ended in this read
                start += self._body.copy(self.server.buffer[start:stop])
                if not self._body.left:
                    self._complete(self._body.placed())
            elif state in STOPPED:
                return
            else:
                cut = self._requests.feed(start, stop, state is not BODY)
                if self.state is HEAD and self._requests.head_bytes > MAX_HEAD:
                    self.malformed(f"request head over {MAX_HEAD} bytes")
                elif self.state is SIZED:  # the head ended where the parser was stopped
                    self._past_head(self.server.buffer[cut:stop])
                start = cut

    def _past_head(self, rest: memoryview) -> None:
        """The head of a body of known length ended where the read was cut: the body is read past
        the parser (`rest`: what this read holds of it and after it), into its place, or, its route
        answering it from its first bytes (`messages.Early`: a refusal), dropped. Where the read
        held fewer than EARLY_BYTES of it and the route could not tell, it is asked again once that
        many are in place (`BodyReader.early_due`)."""
        request = self._request
        request.keep_alive = self._requests.past_head()
        prefix = rest[:self._body.length]
        response = self._early(prefix)
        if response is None:
            self.state = PLACING
            asking = request.early is not None and request.keep_alive
            self._body.place(len(prefix), EARLY_BYTES if asking else 0)  # asked again, once, with more
            return
        self._body.drop()
        self._answer_early(response)

    def _early(self, prefix: memoryview):
        request = self._request
        return request.early(request, prefix) if request.early is not None and request.keep_alive else None

    def _answer_early(self, response) -> None:
        """Answer the request arriving now from its first bytes; the rest of its body is dropped."""
        request, self._request = self._request, None
        self.state = DROPPING
        self.server.limits.release(request)
        self._deadline.set(self.server.limits.timeout_s, self.close)  # the rest must come, but it has had its answer
        self._answers.early(response, request.method != "HEAD")

    def _dropped(self) -> None:
        self.state = IDLE
        if not self._answers.busy:
            self._deadline.set(self.server.idle_timeout_s, self.close)

    def _complete(self, body: bytes | bytearray) -> None:
        request, self._request = self._request, None
        self.state = IDLE
        try:
            self._body.whole(request, body)
        except BodyError as exc:
            self.server.limits.release(request)
            self._refuse(exc)
            return
        if not self._answers.running:
            self._deadline.clear()
        self._answers.request(request)

    # -- what the parser tells (`RequestParser`) ----------------------------------------------------

    def began(self) -> None:
        self.state = HEAD
        if not self._answers.busy:
            self._deadline.set(self.server.limits.timeout_s, self._late)

    def headed(self, request: HttpRequest) -> None:
        self._request = request
        self.state = BODY
        try:
            self._body.sized(request)
        except BodyError as exc:
            self._refuse(exc)
            return
        if request.headers.get("expect", "").lower() == "100-continue" and self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if self._body.length and "transfer-encoding" not in request.headers:
            self.state = SIZED

    def chunk(self, chunk: bytes) -> None:
        self.state = BODY  # (from SIZED: the head's end straddled two reads, and the parser went on)
        try:
            self._body.chunk(self._request, chunk)
        except BodyError as exc:
            self._refuse(exc)

    def parsed(self, keep_alive: bool) -> None:
        self._request.keep_alive = keep_alive
        self._complete(self._body.chunked())

    def upgraded(self) -> None:
        """Answered as HTTP/1.1, then the connection closes."""
        if self.state not in STOPPED:
            self.state = ENDED

    def malformed(self, reason: str) -> None:
        if self.state not in STOPPED:
            _refusals.info("malformed HTTP request from %s answered 400: %s", self.peer, reason)
            self._refuse(BodyError(ErrorCode.INVALID_ARG, reason))

    # -- refusals and what comes after the answers --------------------------------------------------

    def _refuse(self, exc: ApiError) -> None:
        """Answer `exc` after what is in hand, then close: what is left of this request is not read."""
        self.state = REFUSED.get(self.state, REFUSED_IN_BODY)
        self._deadline.clear()
        self._body.stop()
        if self._request is not None:
            self.server.limits.release(self._request)
            self._request = None
        self._answers.response(api_error(exc), False)

    def _late(self) -> None:
        self._refuse(BodyError(ErrorCode.BODY_TIMEOUT, f"the request body did not arrive within "
                                                       f"{self.server.limits.timeout_s:g} s"))  # fmt: skip

    def linger(self) -> None:
        """After the last answer, a refusal: stop sending, drop what still arrives, close when the
        client does or after `LINGER_S`."""
        if not self.open:
            return
        if self.state is ENDED:  # nothing of a request is still on its way
            self.close()
            return
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._deadline.set(LINGER_S, self.close)

    def answered(self) -> None:
        """Every answer is written and the connection kept: time what comes next."""
        if not self.open:
            return
        if self.state is IDLE or self.state is ENDED:
            self._deadline.set(self.server.idle_timeout_s, self.close)
        else:  # the next request has begun (or the rest of one answered early): its time counts from now
            self._deadline.set(self.server.limits.timeout_s, self.close if self.state is DROPPING else self._late)
