"""The HTTP edge of a front end: request bodies read within bounds, and every error as JSON.

A body is read whole before its request counts as pending (a client sending it slowly holds only
its own connection), at most `max_bytes` of it after any Content-Encoding is undone (413 beyond),
within `timeout_s` (408), and one that cannot be decoded (garbage labelled gzip) is a 400. Every
error the server answers, an `ApiError` from a handler or aiohttp's own (unknown endpoint, wrong
method), is Triton's `{"error": "..."}` with its kind's status; an exception nobody expected is
logged and answered 500, never a traceback page.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from atoll.errors import ApiError, ErrorCode

log = logging.getLogger("atoll.server")


class BodyError(ApiError):
    """A request body the server will not take; the connection closes after the answer, since
    what is left of the body is not read."""


def error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


async def read_body(request: web.Request, max_bytes: int, timeout_s: float) -> bytes:
    """The body, or BodyError. After a 413 aiohttp reads on (discarding, for at most its lingering
    time) so the client, still sending, gets the answer; a body that timed out or cannot be decoded
    is marked ended instead (aiohttp would wait on it, or log its decoding error as unhandled)."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _read(request, max_bytes)
    except TimeoutError:
        failure = BodyError(ErrorCode.BODY_TIMEOUT, f"the request body did not arrive within {timeout_s:g} s")
    except (RequestPayloadError, HttpProcessingError) as exc:  # bad encoding or framing
        cause = exc.__cause__ or exc  # aiohttp wraps the parser's error, whose message says what
        failure = BodyError(ErrorCode.INVALID_ARG, f"unreadable request body: {getattr(cause, 'message', None) or cause}")
    request.content.feed_eof()
    raise failure


async def _read(request: web.Request, max_bytes: int) -> bytes:
    too_large = BodyError(ErrorCode.TOO_LARGE, f"request body larger than {max_bytes} bytes")
    size = request.content_length
    if size is not None and "Content-Encoding" not in request.headers:
        # Joined once: aiohttp's `read()` copies it three more times (a 600 KB tensor body cost
        # 0.7 instead of ~0.3 CPU-ms per request).
        if size > max_bytes:
            raise too_large
        return await request.content.readexactly(size) if size else b""  # (aiohttp's empty stream refuses 0)
    chunks, total = [], 0  # chunked, or compressed: only the decoded size counts
    while chunk := await request.content.readany():
        total += len(chunk)
        if total > max_bytes:
            raise too_large
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
        log.info("%s %s: the client closed its connection", request.method, request.path)
        raise asyncio.CancelledError from None
    except Exception as exc:  # a bug: logged with its traceback, answered without one
        log.exception("%s %s failed", request.method, request.path)
        return error(500, f"internal error ({type(exc).__name__})")
