"""Client connections a front end holds, bounded so that idle ones cannot starve real clients: each
costs a file descriptor, and past the open-file limit a front end accepts nothing, readiness probes
included. So a front end raises its soft limit to the hard one, keeps a reserve of descriptors for
its own files and pipes, and bounds each protocol's connections. HTTP (`HttpConnections`) closes
connections that hold no whole request to make room, longest open first; gRPC (`grpc_limits`) has
grpcio's core refuse past the bound and drop unfinished handshakes and idle connections. Idle HTTP
connections also close after `server.idle_timeout_s` (`edge.py`). Measurements: docs/http-edge.md.
"""
from __future__ import annotations

import logging
import resource

from atoll.observe.throttled import Throttled

log = logging.getLogger(__name__)

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
    """The live connections of an `edge.HttpServer`, oldest first, at most `bound` of them.

    Past the bound, a new connection makes room by closing, longest open first, connections that
    hold no whole request: those with nothing or part of a request head first, then those whose
    body is still arriving (not yet a request the server holds: it counts once its body is read).
    A whole request in hand or waiting is never cut."""

    def __init__(self, bound: int, evicted=None, name: str = "HTTP (server.max_connections)"):
        self.bound = bound
        self.name = name  # for the log: which port, and what sets its bound
        self.evicted = evicted  # a prometheus Counter, or None
        self._live: dict = {}  # connection -> None, in the order they came
        self._warn = Throttled(log)

    def __iter__(self):
        return iter(self._live)

    def __len__(self) -> int:
        return len(self._live)

    def add(self, connection) -> None:
        self._live[connection] = None
        if len(self._live) > self.bound:
            self._make_room(connection)

    def discard(self, connection) -> None:
        self._live.pop(connection, None)

    def _make_room(self, new) -> None:
        """Close connections to bring the live ones under the bound, with a margin, so that a full
        front end does not sweep its list on every accept; `new`, the one that came, is not one of
        them (a client's request may be on its way on it)."""
        idle, arriving = [], []
        for conn in self._live:
            if conn is not new and not conn.holds_request:
                (arriving if conn.receiving_body else idle).append(conn)
        excess = len(self._live) - self.bound + self.bound // EVICT_SHARE
        victims = (idle + arriving)[:max(0, excess)]
        for conn in victims:
            conn.abort()  # (its connection_lost, on a later turn, discards it again)
            self.discard(conn)
        if not victims:
            return
        if self.evicted is not None:
            self.evicted.inc(len(victims))
        self._warn.warning("%d %s connections open, bound %d: closed %d without a whole request (%d idle), longest "
                           "open first", len(self._live) + len(victims), self.name, self.bound, len(victims),
                           min(len(idle), len(victims)))  # fmt: skip
