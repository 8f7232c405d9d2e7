"""Client connections a front end holds, bounded so that idle ones cannot starve real clients.

Every connection costs the process a file descriptor. With the usual soft limit of 1,024, a client
that opened 1,100 TCP connections and sent nothing (0.1 s of work for it) left the front end unable
to accept: every infer and readiness probe timed out, and asyncio logged each failed accept (some
580,000 lines in 35 s). So a front end raises its soft limit to the hard one, keeps a reserve of
descriptors for its own files and pipes, and bounds each protocol's connections:

- HTTP (`HttpConnections`): when a new connection would pass the bound, connections that hold no
  whole request (nothing sent, part of the headers, or a body still arriving) are closed to make
  room, longest open first, so they cannot keep a real client out; a request whose body has
  arrived is never cut. Connections with no request are also closed after
  `server.idle_timeout_s`, and bodies must arrive within `server.body_timeout_s`.
- gRPC (`grpc_limits`): grpcio's core refuses connections past the bound itself and drops those
  that have not finished the HTTP/2 handshake in time, or that carry no call for the idle timeout.
"""

from __future__ import annotations

import asyncio
import logging
import resource

from aiohttp import web

from atoll.http_edge import TritonErrors
from atoll.throttled import Throttled

log = logging.getLogger("atoll.connections")

RESERVE_FDS = 256  # a front end's own descriptors: pipes, the supervisor link, DPU and shm files
EVICT_SHARE = 8  # a full front end frees 1/8 of its bound at once, not one connection per accept
HANDSHAKE_TIMEOUT_S = 5.0  # gRPC: a connection that has not sent its HTTP/2 preface by then


def raise_open_file_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit (where that is unlimited,
    to 2**20, Linux's default ceiling), leaving the hard limit as it is; the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):  # a container may refuse: the bound follows the soft limit
            pass
    return soft


def connection_bound(max_connections: int, open_files: int) -> int:
    """Client connections each protocol may hold in one front end: `max_connections` when set,
    else half of the descriptors left after the reserve (HTTP and gRPC share them)."""
    if max_connections > 0:
        return max_connections
    return max(16, (open_files - RESERVE_FDS) // 2)


def grpc_limits(bound: int, idle_timeout_s: float) -> list[tuple[str, int]]:
    """grpcio server options bounding its connections as `HttpConnections` bounds HTTP's."""
    return [("grpc.max_allowed_incoming_connections", bound),
            ("grpc.server_handshake_timeout_ms", round(HANDSHAKE_TIMEOUT_S * 1000)),
            ("grpc.max_connection_idle_ms", round(idle_timeout_s * 1000))]  # fmt: skip


class HttpConnections:
    """The HTTP side of an `AppRunner` not yet set up: `accept` is the listening socket's protocol
    factory, and `middleware`, made the app's first, notes each connection's request in progress.
    The runner's low-level server, made by its setup, keeps the live connections oldest first.

    Past the bound, a new connection makes room by closing, longest open first, connections with
    no request, then those whose request body is still arriving (not yet a request the server
    holds: it counts once its body is read). A burst accepted in one turn of the loop is listed
    only on the next, so the bound is checked again then."""

    def __init__(self, runner: web.AppRunner, bound: int, evicted=None, name: str = "HTTP (server.max_connections)"):
        self.runner = runner
        runner.app.middlewares.insert(0, self.middleware)
        self.bound = bound
        self.name = name  # for the log: which port, and what sets its bound
        self.evicted = evicted  # a prometheus Counter, or None
        self._requests: dict[object, web.Request] = {}  # connection -> its request in progress
        # Connections accepted in this turn of the loop: the server lists them from the next turn
        # (a turn accepts up to the backlog at once), after `_listed` has run.
        self._unlisted = 0
        self._crowded = False  # this turn reached the bound: look again once they are listed
        # places freed by the last sweep that later connections may take: what it closed stays in
        # the server's list until the next turn
        self._room = 0
        self._warn = Throttled(log)

    def accept(self) -> asyncio.BaseProtocol:
        server = self.runner.server
        connections = server.connections
        if len(connections) + self._unlisted < self.bound:
            self._room = 0
        else:
            self._crowded = True
            if self._room:
                self._room -= 1
            else:
                self._make_room(connections, incoming=1)
        if not self._unlisted:
            asyncio.get_running_loop().call_soon(self._listed)
        self._unlisted += 1
        protocol = server()
        protocol.__class__ = TritonErrors
        return protocol

    def _listed(self) -> None:
        """First callback of the turn whose next callbacks list this turn's connections."""
        self._unlisted = 0
        if self._crowded:
            self._crowded = False
            asyncio.get_running_loop().call_soon(self._check)  # runs in the turn after: they are listed

    def _check(self) -> None:
        connections = self.runner.server.connections
        if len(connections) > self.bound:
            self._make_room(connections, incoming=0)

    @web.middleware
    async def middleware(self, request: web.Request, handler):
        self._requests[request.protocol] = request  # (aiohttp runs a connection's requests one by one)
        try:
            return await handler(request)
        finally:
            self._requests.pop(request.protocol, None)

    def _make_room(self, connections: list, incoming: int) -> None:
        """Close connections to bring the live ones, `incoming` new ones and the unlisted ones under
        the bound, with a margin."""
        live, idle, arriving = self._unlisted + incoming, [], []
        for conn in connections:  # oldest first
            if conn.transport is None:  # closed already (force_close drops the transport)
                continue
            live += 1
            request = self._requests.get(conn)
            if request is None:
                idle.append(conn)
            elif not request.content.is_eof():
                arriving.append(conn)
        excess = live - self.bound + self.bound // EVICT_SHARE
        victims = (idle + arriving)[:max(0, excess)]
        for conn in victims:
            conn.force_close()
        self._room = max(0, self.bound - (live - len(victims)))
        if not victims:
            return
        if self.evicted is not None:
            self.evicted.inc(len(victims))
        self._warn.warning("%d %s connections open, bound %d: closed %d without a whole request (%d idle), longest "
                           "open first", live, self.name, self.bound, len(victims), min(len(idle), len(victims)))  # fmt: skip


async def listen(connections: HttpConnections, host: str, port: int, backlog: int = 100,
                 reuse_port: bool = True) -> asyncio.Server:
    """A listening socket whose connections `connections` bounds; `reuse_port` to share the port
    with other processes (the front ends)."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(connections.accept, host, port, reuse_port=reuse_port, backlog=backlog)
