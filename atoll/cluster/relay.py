"""The cluster endpoint's native relay (native/relay.c) for KServe v2 infer requests over HTTP: C
threads read each request, send it to a node and write the answer back, without the event loop.
A best-effort request's first try goes to the node `routing` would pick, chosen in C from the table
of candidates this module publishes whenever the view changes and from the router's counts, which
are the relay's (native/routes.h): no Python. Everything else is routed here, as for every other
path (`ClusterView`'s `Attempts`: routing, retries, counts), by calls under the GIL from the relay's
thread: a request naming "priority" or a model the table lacks (`_route`), a first try that failed
or was refused (`_resume`), and each try after it (`_answered`). What the relay does not take whole
(every other route, a restricted call without its header, encoded or chunked bodies, a stalled head
or body, connections past RELAY_CONNECTIONS) it hands on, with the bytes already read, to the
endpoint's own HTTP edge, which answers it as it always did.

The relay is built with the system C compiler on first use and cached by content under
build/relay/ (`gpu_runtime.native`); without a compiler the endpoint serves every request on its
event loop, as with `server.endpoint_relay=python`. Figures: docs/benchmarks.md, "the cluster
endpoint's relay".
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from types import ModuleType

from atoll.cluster.cluster_view import Attempts
from atoll.cluster.http_proxy import HOP, HttpProxy, real_time_in
from atoll.cluster.node_client import NodeGone
from atoll.http.edge import HttpServer
from atoll.http.messages import api_error
from gpu_runtime.native import extension_module

SOURCE = Path(__file__).with_name("native") / "relay.c"
ROUTES = SOURCE.with_name("routes.h")  # the counts and the table of first tries
HTTP1 = Path(__file__).parents[1] / "http" / "native" / "http1.h"  # shared with the front ends' intake
RELAY_CONNECTIONS = 1024  # client connections the relay holds, a thread each (256 KB of stack); past it the edge's


def native_module() -> ModuleType:
    """The compiled relay (`NativeBuildError` without a compiler or Python's headers)."""
    return extension_module([SOURCE, ROUTES, HTTP1], "_relay", "relay")


class InferRelay:
    """Relays the infer requests arriving on `sock` (listening) for `proxy` (its view, restrictions
    and timeout), handing everything else to `edge`, the endpoint's HTTP server; `max_body`,
    `budget` (bytes of bodies held at once), `idle_s` and `stall_s` are the edge's own limits.
    Its connections to the nodes take the first of `congestion` (TCP congestion controls) that the
    kernel allows (none: the system's default)."""

    def __init__(self, proxy: HttpProxy, edge: HttpServer, sock: socket.socket, max_body: int, budget: int,
                 idle_s: float, stall_s: float, max_connections: int, congestion: tuple[str, ...] = ()):  # fmt: skip
        self._proxy = proxy
        self._edge = edge
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        rule = proxy.restrictions.http_rule("/v2/models/m/infer")
        native = native_module()
        view = proxy.view
        self._routing = native.Routing()
        self._published: list | None = None
        view.router.count_with(self._routing)
        view.metrics.relayed_by(self._routing.relayed)
        view.watch(self._publish)
        self._publish()
        self._native = native.Relay(
            listen_fd=sock.fileno(), routing=self._routing, route=self._route, resume=self._resume,
            answered=self._answered, failed=self._failed,
            handoff=self._handoff, hop=sorted(HOP), rule=None if rule is None else (rule.key, rule.value),
            max_body=max_body, budget=budget, idle_s=idle_s, stall_s=stall_s, timeout_s=proxy.timeout_s,
            max_connections=min(max_connections, RELAY_CONNECTIONS), congestion=congestion)  # fmt: skip
        self._native.start()

    def counts(self) -> dict[str, int]:
        """Requests relayed, connections handed to the edge, body bytes held, connections live."""
        return self._native.counts()

    async def stop(self, drain_s: float) -> None:
        """Accept no more; answer what is in hand for up to `drain_s`, then close every connection."""
        await asyncio.get_running_loop().run_in_executor(None, self._native.stop, drain_s)
        self._sock.close()

    def _publish(self) -> None:
        """The view's candidates to the relay's table, where they changed."""
        routes = self._proxy.view.routes()
        if routes != self._published:
            self._routing.publish(routes)
            self._published = routes

    # -- called by the relay's threads, under the GIL -------------------------------------------------

    def _route(self, model: str, version: str | None, json_part: bytes | None, json_length: int | None):
        """The first node for an infer request: (attempts, name, `NodeHttp.relay_to`), or the error's
        whole HTTP answer. `json_part` is its JSON part where that names "priority" (else None)."""
        view = self._proxy.view
        rt = json_part is not None and real_time_in(json_part, json_length)
        attempts = Attempts(view, model, view.candidates(model, version), rt)
        return self._next(attempts) or self._failed(attempts, False)

    def _resume(self, model: str, version: str | None, name: str, address: str):
        """The relay's first try (to `name` at `address`, counted out) as the target that `_answered`
        goes on from, once it failed or was refused."""
        view = self._proxy.view
        return Attempts(view, model, view.candidates(model, version), False, (name,)), name, address

    def _answered(self, attempts: Attempts, name: str, gone: str | None, more: bool):
        """`name` answered (`gone`: it did not, why); with `more`, the next node to try, or None."""
        attempts.answered(name, None if gone is None else NodeGone(gone))
        return self._next(attempts) if more else None

    def _failed(self, attempts: Attempts, timed_out: bool) -> bytes:
        """The answer when no node answered: the forward timed out, or every try failed."""
        return api_error(self._proxy.timed_out() if timed_out else attempts.failure()).encode(True)

    @staticmethod
    def _next(attempts: Attempts) -> tuple[Attempts, str, str] | None:
        name = attempts.next()
        if name is None:
            return None
        state = attempts.view.nodes.get(name)
        if state is None:  # gone from the directory since it was chosen
            attempts.answered(name, NodeGone("left the directory"))
            return InferRelay._next(attempts)
        return attempts, name, state.http.relay_to

    def _handoff(self, fd: int, prefix: bytes) -> None:
        """The connection on `fd` is the edge's from now on, `prefix` what the relay read of it."""
        try:
            self._loop.call_soon_threadsafe(self._adopt, fd, prefix)
        except RuntimeError:  # the loop has closed: the server is gone
            os.close(fd)

    def _adopt(self, fd: int, prefix: bytes) -> None:
        self._edge.adopt(socket.socket(fileno=fd), prefix)
