"""Request bodies a front end will take: how large (after any Content-Encoding is undone), in
which encodings, and how many bytes of them all it holds at once (`BodyBudget`). The connection
(`edge.Connection`) applies them as a body arrives, before its handler runs."""

from __future__ import annotations

import logging
import os
import zlib
from dataclasses import dataclass

from atoll.http.messages import HttpRequest
from atoll.kserve.errors import ApiError, ErrorCode
from atoll.observe.throttled import Throttled

log = logging.getLogger(__name__)
DECODERS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class BodyError(ApiError):
    """A request body the server will not take; the connection closes after the answer, since
    what is left of the body is not read."""


@dataclass(frozen=True)
class BodyLimits:
    max_bytes: int
    timeout_s: float
    budget: BodyBudget | None = None

    def release(self, request: HttpRequest) -> None:
        """Give back `request`'s share of the budget: it is answered, or given up."""
        if self.budget is not None:
            self.budget.release(request)


class BodyBudget:
    """Bytes of request bodies one front end holds at once (a body with a Content-Length counts
    whole from its start, a chunked one as it arrives), so that bodies held back cannot exhaust its
    memory (docs/http-edge.md). When a body's next bytes would pass `total`, the largest body still
    arriving goes: another one is cut off (its connection closed), or this one is refused (503,
    Retry-After). So bodies held back cannot keep smaller requests out, and one largest request
    always fits. A request's share is given back when it is answered or given up (`release`).

    `elsewhere`, where set, gives the bytes of bodies the front end holds outside this budget (its
    native intake's, at most `total - max_request_bytes`): they count against `total` here too, so
    the two together stay within it while one largest request still fits here."""

    def __init__(self, total: int, refused=None):
        self.total = total
        self.used = 0
        self.refused = refused  # a prometheus Counter, or None
        self.elsewhere = _nothing
        self._arriving: dict[int, HttpRequest] = {}  # bodies still being read, by id
        self._warn = Throttled(log)

    def take(self, request: HttpRequest, size: int) -> None:
        """Count `size` more bytes of `request`'s body, or BodyError (503) if it is the one to go."""
        self._arriving[id(request)] = request
        while self.used + self.elsewhere() + size > self.total:
            largest = max(self._arriving.values(), key=lambda r: r.held + (size if r is request else 0))
            if largest is request:
                if self.refused is not None:
                    self.refused.inc()
                raise BodyError(ErrorCode.UNAVAILABLE, f"this front end holds {self.used} bytes of request bodies "
                                                       f"and may hold {self.total} (server.body_memory_bytes): try "
                                                       "again", 1)  # fmt: skip
            self._cut_off(largest)
        self.used += size
        request.held += size

    def reserve(self, request, size: int) -> None:
        """Count `size` more bytes for a request whose body has arrived (what decoding it will
        allocate; a gRPC message: anything with `held`), or BodyError (503) where they do not fit:
        nothing is cut off for them. A request holding everything held may pass the total (one
        largest request always fits)."""
        if self.used + self.elsewhere() + size > self.total and self.used > request.held:
            if self.refused is not None:
                self.refused.inc()
            raise BodyError(ErrorCode.UNAVAILABLE, f"this front end holds {self.used} bytes of requests and may hold "
                                                   f"{self.total} (server.body_memory_bytes): try again", 1)  # fmt: skip
        self.used += size
        request.held += size

    def arrived(self, request: HttpRequest) -> None:
        """`request`'s body is whole (or given up): it is no longer cut off to make room."""
        self._arriving.pop(id(request), None)

    def release(self, request: HttpRequest) -> None:
        self.arrived(request)
        self.used -= request.held
        request.held = 0

    def _cut_off(self, request: HttpRequest) -> None:
        share = request.held
        self.release(request)
        request.connection.abort()
        self._warn.warning("request bodies at server.body_memory_bytes (%d): cut off one still arriving after %d "
                           "bytes to make room", self.total, share)  # fmt: skip


def _nothing() -> int:
    return 0


def body_budget_bytes(configured: int, front_ends: int, max_request_bytes: int) -> int:
    """One front end's `BodyBudget`: `configured`, else an eighth of the machine's memory shared
    among the front ends; never below one largest request."""
    if configured <= 0:
        configured = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 8 // max(1, front_ends)
    return max(configured, max_request_bytes)


def content_length(headers: dict[str, str]) -> int | None:
    value = headers.get("content-length")
    return int(value) if value is not None and value.isdigit() else None  # (the parser refuses bad ones)


def too_large(max_bytes: int) -> BodyError:
    return BodyError(ErrorCode.TOO_LARGE, f"request body larger than {max_bytes} bytes")


def decoded(body: bytes, encoding: str, max_bytes: int) -> bytes:
    wbits = DECODERS.get(encoding)
    if wbits is None:
        raise BodyError(ErrorCode.INVALID_ARG, f"unreadable request body: content-encoding {encoding!r} is not "
                                               f"supported (gzip, deflate)")  # fmt: skip
    decoder = zlib.decompressobj(wbits)
    try:
        out = decoder.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise BodyError(ErrorCode.INVALID_ARG, f"unreadable request body: content-encoding {encoding}: {exc}") from None
    if len(out) > max_bytes:
        raise too_large(max_bytes)
    if not decoder.eof:
        raise BodyError(ErrorCode.INVALID_ARG, f"unreadable request body: content-encoding {encoding}: the stream "
                                               "is cut short")  # fmt: skip
    return out
