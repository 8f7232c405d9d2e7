"""The HTTP edge of a front end: request bodies read within bounds, and every error as JSON.

A body is read whole before its request counts as pending (a client sending it slowly holds only
its own connection), at most `max_bytes` of it after any Content-Encoding is undone (413 beyond),
within `timeout_s` (408), and one that cannot be decoded (garbage labelled gzip) is a 400. All the
bodies a front end holds at once, being read or read and not yet answered, stay within its
`BodyBudget`: past it the largest body still arriving is cut off, or this one refused (503 with
Retry-After). Every error the server answers, an `ApiError` from a handler or aiohttp's own
(unknown endpoint, wrong method, a request its parser refuses: `TritonErrors`), is Triton's
`{"error": "..."}` with its kind's status; an exception nobody expected is logged and answered
500, never a traceback page. A client that goes away mid-body is logged at INFO, at most every
10 s.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from http import HTTPStatus

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler, RequestPayloadError

from atoll.errors import ApiError, ErrorCode
from atoll.throttled import Throttled

log = logging.getLogger("atoll.server")
_gone = Throttled(log)  # connections closed mid-request: a client can repeat that at will


class TritonErrors(RequestHandler):
    """aiohttp's connection protocol, but what its HTTP parser refuses before any route runs (a bad
    request line or method, a header line over 8,190 bytes, a bad Content-Length or chunk size, no
    Host) is answered with Triton's `{"error": ...}` like every other error, and logged at INFO
    without a traceback at most every 10 s: it is the client's fault. aiohttp answered plain text
    and logged each at ERROR with a ~10-line traceback, so a client sending garbage could fill the
    log as fast as it could send. And a client that half-closes after its request is answered
    (`eof_received`). Set as the class of each connection's protocol (it adds no state), since
    aiohttp's server builds them itself."""

    __slots__ = ()
    _refusals = Throttled(log)

    def eof_received(self) -> bool | None:
        """The client shut its sending side. After a whole request (a half-close, as `nc -N` and
        some HTTP/1.0 tools do) it still reads: the request is answered, then the connection
        closed, as Triton does; aiohttp took the end of the stream for the client leaving and
        cancelled the request. Idle, or with a body cut short, there is nothing to answer."""
        try:
            self._parser.feed_eof()  # raises while a body is cut short
        except Exception:
            return None  # the transport closes: its request is cancelled
        if self._messages:  # requests not yet begun (pipelined): the last one ends the connection
            message, payload = self._messages[-1]
            if getattr(message, "should_close", None) is not None:  # (a parse error's closes anyway)
                self._messages[-1] = (message._replace(should_close=True), payload)
            return True  # the transport stays open for the answers
        if self._waiter is not None and not self._waiter.done():
            return None  # idle between requests: nothing to answer
        self.close()  # the request in hand is the last: answered, then the connection closes
        return True

    def handle_error(self, request, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status >= 500:  # aiohttp's own failure, not the client's: its logging and answer
            return super().handle_error(request, status, exc, message)
        reason = (getattr(exc, "message", None) or message or HTTPStatus(status).phrase).split("\n")[0].rstrip(": ")
        self._refusals.info("malformed HTTP request from %s answered %d: %s", request.remote, status, reason)
        response = error(status, reason)
        response.force_close()  # the parser cannot find where the next request starts
        return response


class BodyError(ApiError):
    """A request body the server will not take; the connection closes after the answer, since
    what is left of the body is not read."""


class BodyBudget:
    """Bytes of request bodies one front end holds at once (a body with a Content-Length counts
    whole from its start, a chunked one as it arrives). Without it, 30 connections each sending
    all but the last byte of a 64 MB body grew a front end by 1.9 GB (2-core VM); a few hundred
    would have exhausted the machine's memory within the body timeout. When a body's next bytes
    would pass `total`, the largest body still arriving goes: another one is cut off (its
    connection closed), or this one is refused (503, Retry-After). So bodies held back cannot keep
    smaller requests out, and one largest request always fits. Whoever calls `take` calls
    `arrived` once the body is whole or given up (`read_body` does); a request's share is given
    back when its handler returns (`middleware`, the app's)."""

    KEY = "atoll.body_bytes"  # a request's share, kept on the request

    def __init__(self, total: int, refused=None):
        self.total = total
        self.used = 0
        self.refused = refused  # a prometheus Counter, or None
        self._arriving: dict[int, web.Request] = {}  # bodies still being read, by id
        self._warn = Throttled(log)

    def take(self, request: web.Request, size: int) -> None:
        """Count `size` more bytes of `request`'s body, or BodyError (503) if it is the one to go."""
        self._arriving[id(request)] = request
        while self.used + size > self.total:
            largest = max(self._arriving.values(), key=lambda r: r.get(self.KEY, 0) + (size if r is request else 0))
            if largest is request:
                if self.refused is not None:
                    self.refused.inc()
                raise BodyError(ErrorCode.UNAVAILABLE, f"this front end holds {self.used} bytes of request bodies "
                                                       f"and may hold {self.total} (server.body_memory_bytes): try "
                                                       "again", 1)  # fmt: skip
            self._cut_off(largest)
        self.used += size
        request[self.KEY] = request.get(self.KEY, 0) + size

    def arrived(self, request: web.Request) -> None:
        """`request`'s body is whole (or given up): it is no longer cut off to make room."""
        self._arriving.pop(id(request), None)

    def _cut_off(self, request: web.Request) -> None:
        self.arrived(request)
        share = request.pop(self.KEY, 0)
        self.used -= share
        request.protocol.force_close()  # its handler is cancelled (handler_cancellation)
        self._warn.warning("request bodies at server.body_memory_bytes (%d): cut off one still arriving after %d "
                           "bytes to make room", self.total, share)  # fmt: skip

    @web.middleware
    async def middleware(self, request: web.Request, handler):
        try:
            return await handler(request)
        finally:
            self.used -= request.pop(self.KEY, 0)


def body_budget_bytes(configured: int, front_ends: int, max_request_bytes: int) -> int:
    """One front end's `BodyBudget`: `configured`, else an eighth of the machine's memory shared
    among the front ends; never below one largest request."""
    if configured <= 0:
        configured = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 8 // max(1, front_ends)
    return max(configured, max_request_bytes)


def error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


async def read_body(request: web.Request, max_bytes: int, timeout_s: float, budget: BodyBudget | None = None) -> bytes:
    """The body, or BodyError. After a 413 aiohttp reads on (discarding, for at most its lingering
    time) so the client, still sending, gets the answer; a body that timed out or cannot be decoded
    is marked ended instead (aiohttp would wait on it, or log its decoding error as unhandled)."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _read(request, max_bytes, budget)
    except TimeoutError:
        failure = BodyError(ErrorCode.BODY_TIMEOUT, f"the request body did not arrive within {timeout_s:g} s")
    except (RequestPayloadError, HttpProcessingError) as exc:  # bad encoding or framing
        cause = exc.__cause__ or exc  # aiohttp wraps the parser's error, whose message says what
        failure = BodyError(ErrorCode.INVALID_ARG, f"unreadable request body: {getattr(cause, 'message', None) or cause}")
    request.content.feed_eof()
    raise failure


async def _read(request: web.Request, max_bytes: int, budget: BodyBudget | None) -> bytes:
    try:
        return await _read_counted(request, max_bytes, budget)
    except RuntimeError as exc:  # aiohttp's word for a connection closed under a read
        raise ConnectionResetError(str(exc)) from None
    finally:
        if budget is not None:
            budget.arrived(request)


async def _read_counted(request: web.Request, max_bytes: int, budget: BodyBudget | None) -> bytes:
    too_large = BodyError(ErrorCode.TOO_LARGE, f"request body larger than {max_bytes} bytes")
    size = request.content_length
    if size is not None and "Content-Encoding" not in request.headers:
        if size > max_bytes:
            raise too_large
        if budget is not None:  # counted whole before it arrives: cut off first if it is held back
            budget.take(request, size)
        # Joined once: aiohttp's `read()` copies it three more times (a 600 KB tensor body cost
        # 0.7 instead of ~0.3 CPU-ms per request).
        return await request.content.readexactly(size) if size else b""  # (aiohttp's empty stream refuses 0)
    chunks, total = [], 0  # chunked, or compressed: only the decoded size counts, as it is decoded
    while chunk := await request.content.readany():
        total += len(chunk)
        if total > max_bytes:
            raise too_large
        if budget is not None:
            budget.take(request, len(chunk))
        chunks.append(chunk)
    return b"".join(chunks)


@web.middleware
async def json_errors(request: web.Request, handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        retry = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s else None
        response = error(exc.code.http, exc.message, retry)
        if isinstance(exc, BodyError):
            response.force_close()
        return response
    except web.HTTPException as exc:  # aiohttp's own answers (unknown path, wrong method)
        if exc.status < 400:
            raise
        headers = {k: v for k, v in exc.headers.items() if k == "Allow"}
        return error(exc.status, exc.reason, headers)  # Triton's words: "Not Found"
    except asyncio.CancelledError:
        raise
    except (ConnectionError, EOFError):  # the client went away (mid-body): nobody to answer
        _gone.info("%s %s: the connection closed mid-request (the client went away, or its body was cut off "
                   "for room; at most one such line every 10 s)", request.method, request.path)  # fmt: skip
        raise asyncio.CancelledError from None
    except Exception as exc:  # a bug: logged with its traceback, answered without one
        log.exception("%s %s failed", request.method, request.path)
        return error(500, f"internal error ({type(exc).__name__})")
