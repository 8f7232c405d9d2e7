"""An `InferenceServer` on a free local port over the given `Endpoints`, served as a front end
serves it (`edge.HttpServer`, or its native intake in front of it), for tests that talk to it
through a real aiohttp client or a raw socket in this process."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import aiohttp

from atoll.front_end.http_routes import InferenceServer
from atoll.front_end.intake import NativeIntake
from atoll.http.bodies import BodyBudget
from atoll.http.connections import HttpConnections


class Served:
    """The server's address, an aiohttp session whose paths are relative to it, and the edge
    (`edge.HttpServer`) serving it."""

    def __init__(self, host: str, port: int, session: aiohttp.ClientSession, edge, intake=None):
        self.host, self.port, self.session, self.edge, self.intake = host, port, session, edge, intake

    def request(self, method: str, path: str, **kw):
        return self.session.request(method, path, **kw)

    def get(self, path: str, **kw):
        return self.session.get(path, **kw)

    def post(self, path: str, **kw):
        return self.session.post(path, **kw)


@contextlib.asynccontextmanager
async def http_served(endpoints, max_bytes: int = 1 << 20, body_timeout_s: float = 30.0, bound: int = 64,
                      idle_timeout_s: float = 300.0, pace=None, intake: bool = False, restrictions=None,
                      budget: BodyBudget | None = None, local: socket.socket | None = None):  # fmt: skip
    """Serving `endpoints` until the block is left, then shut down; with `intake`, infer requests
    through the native intake (`intake.NativeIntake`), the rest handed on; on `local` (a local
    socket, listening) as well as on the port."""
    server = InferenceServer(endpoints, endpoints.metrics, body_timeout_s, budget, restrictions)
    edge = server.http(max_bytes, HttpConnections(bound), idle_timeout_s, pace)
    native = None
    if intake:
        sock = socket.create_server(("127.0.0.1", 0))
        rule = server.restrictions.http_rule("/v2/models/m/infer")
        native = NativeIntake(edge, (sock,) if local is None else (sock, local), rule)
        host, port = sock.getsockname()[:2]
    else:
        listener = await edge.listen("127.0.0.1", 0)
        host, port = listener.sockets[0].getsockname()[:2]
        if local is not None:
            await edge.listen_on(local)
    try:
        async with aiohttp.ClientSession(f"http://{host}:{port}") as session:
            yield Served(host, port, session, edge, native)
    finally:
        await asyncio.gather(edge.shutdown(0), *([native.stop(0)] if native is not None else []))
