"""HTTP/1.1 requests and answers as the front ends' handlers see them, and the routes to the handlers.

A request reaches its handler whole (the connection, `edge.Connection`, reads its body within
bounds first); a handler answers with an `HttpResponse` or raises an `ApiError`, which is answered as
Triton answers errors: `{"error": "..."}` with its kind's status. Routes are matched segment by
segment, keyed by the number of segments and the last one, so the infer route costs a dictionary
lookup and a few comparisons, not a scan of regular expressions.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from urllib.parse import unquote

from atoll.kserve.errors import ApiError, ErrorCode

_PHRASES = {s.value: s.phrase for s in HTTPStatus}


class HttpRequest:
    """A request whose head and body have arrived. `headers` are keyed in lower case; `params` are
    the route's captures (`match_info`); `handler` and `early` are its route's (`Routes.resolve`),
    or `handler` the 404 or 405 it gets; `held` is its share of the body budget; `keep_alive`:
    the client keeps the connection open after it; `seen`: what `early` read of the body that its
    handler may use instead of reading it again (None: nothing)."""

    __slots__ = ("method", "path", "query", "headers", "body", "connection", "params", "handler", "early", "held",
                 "keep_alive", "seen")  # fmt: skip

    def __init__(self, method: str, path: str, query: str, headers: dict[str, str], connection=None):
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = b""
        self.connection = connection
        self.params: dict[str, str] = {}
        self.handler: Handler | ApiError | None = None
        self.early: Early | None = None
        self.held = 0
        self.keep_alive = True
        self.seen = None

    @property
    def remote(self) -> str:
        return self.connection.peer if self.connection is not None else "?"


class HttpResponse:
    __slots__ = ("status", "body", "content_type", "headers")

    def __init__(self, status: int = 200, body: bytes = b"", content_type: str = "text/plain; charset=utf-8",
                 headers: dict[str, str] | None = None):
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers

    @classmethod
    def json(cls, doc, status: int = 200, headers: dict[str, str] | None = None) -> HttpResponse:
        return cls(status, json.dumps(doc).encode(), "application/json", headers)

    def encode(self, keep_alive: bool, with_body: bool = True) -> bytes:
        """The status line, the headers and (unless answering HEAD) the body."""
        head = _head_start(self.status, self.content_type) + f"Content-Length: {len(self.body)}\r\n".encode()
        if self.headers:
            head += "".join(f"{name}: {value}\r\n" for name, value in self.headers.items()).encode("latin-1")
        head += b"\r\n" if keep_alive else b"Connection: close\r\n\r\n"
        return head + self.body if with_body and self.body else head


@functools.lru_cache(maxsize=64)
def _head_start(status: int, content_type: str) -> bytes:
    """An answer's status line and Content-Type, made once per pair (every answer sends them)."""
    return f"HTTP/1.1 {status} {_PHRASES.get(status, 'Unknown')}\r\nContent-Type: {content_type}\r\n".encode("latin-1")


def error(status: int, message: str, headers: dict[str, str] | None = None) -> HttpResponse:
    return HttpResponse.json({"error": message}, status, headers)


def api_error(exc: ApiError) -> HttpResponse:
    return error(exc.code.http, exc.message, {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s else None)


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]
# A route's answer from a request's head and the first bytes of its body, where it can give one
# without the rest (an overload refusal), or None; what is left of the body is then read and dropped.
Early = Callable[[HttpRequest, memoryview], "HttpResponse | None"]


class _Route:
    __slots__ = ("segments", "names", "methods")

    def __init__(self, segments: tuple[str | None, ...], names: list[str]):
        self.segments = segments  # None: a capture
        self.names = names
        self.methods: dict[str, tuple[Handler, Early | None]] = {}


class Routes:
    """Handlers by method and path pattern (`/v2/models/{model}/infer`: a `{name}` segment matches
    any one segment, percent-decoded, and is passed in `request.params`). GET routes answer HEAD."""

    def __init__(self):
        self._table: dict[tuple[int, str | None], list[_Route]] = {}

    def add(self, method: str, pattern: str, handler: Handler, early: Early | None = None) -> None:
        """`method` "*" takes any method."""
        parts = pattern.split("/")
        segments = tuple(None if s.startswith("{") else s for s in parts)
        routes = self._table.setdefault((len(segments), segments[-1]), [])
        route = next((r for r in routes if r.segments == segments), None)
        if route is None:
            route = _Route(segments, [s[1:-1] for s in parts if s.startswith("{")])
            routes.append(route)
        route.methods[method] = (handler, early)

    def resolve(self, request: HttpRequest) -> Handler:
        """The request's handler, its captures put in `request.params` and its route's `Early` in
        `request.early`; ApiError 404 or 405."""
        parts = request.path.split("/")
        n = len(parts)
        for route in self._table.get((n, parts[-1]), []) + self._table.get((n, None), []):
            if all(s is None or s == p for s, p in zip(route.segments, parts)):
                found = route.methods.get("GET" if request.method == "HEAD" else request.method)
                found = found or route.methods.get("*")
                if found is None:
                    allowed = sorted(route.methods) + (["HEAD"] if "GET" in route.methods else [])
                    raise MethodNotAllowed(", ".join(allowed))
                captured = (unquote(p) for s, p in zip(route.segments, parts) if s is None)
                request.params = dict(zip(route.names, captured))
                handler, request.early = found
                return handler
        raise ApiError(ErrorCode.NOT_FOUND, "Not Found")  # Triton's words


class MethodNotAllowed(ApiError):
    def __init__(self, allow: str):
        super().__init__(ErrorCode.NOT_FOUND, "Method Not Allowed")
        self.allow = allow

    def response(self) -> HttpResponse:
        return error(405, self.message, {"Allow": self.allow})
