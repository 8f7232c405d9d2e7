"""An `InferenceServer` on a free local port over the given `Endpoints`, served as a front end
serves it (`edge.HttpServer`), for tests that talk to it through a real aiohttp client or a
raw socket in this process."""

from __future__ import annotations

import contextlib

import aiohttp

from atoll.front_end.http_routes import InferenceServer
from atoll.http.connections import HttpConnections


class Served:
    """The server's address, an aiohttp session whose paths are relative to it, and the edge
    (`edge.HttpServer`) serving it."""

    def __init__(self, host: str, port: int, session: aiohttp.ClientSession, edge):
        self.host, self.port, self.session, self.edge = host, port, session, edge

    def request(self, method: str, path: str, **kw):
        return self.session.request(method, path, **kw)

    def get(self, path: str, **kw):
        return self.session.get(path, **kw)

    def post(self, path: str, **kw):
        return self.session.post(path, **kw)


@contextlib.asynccontextmanager
async def http_served(endpoints, max_bytes: int = 1 << 20, body_timeout_s: float = 30.0, bound: int = 64,
                      idle_timeout_s: float = 300.0, pace=None):
    """Serving `endpoints` until the block is left, then shut down."""
    server = InferenceServer(endpoints, endpoints.metrics, body_timeout_s).http(max_bytes, HttpConnections(bound),
                                                                                idle_timeout_s, pace)
    listener = await server.listen("127.0.0.1", 0)
    host, port = listener.sockets[0].getsockname()[:2]
    try:
        async with aiohttp.ClientSession(f"http://{host}:{port}") as session:
            yield Served(host, port, session, server)
    finally:
        await server.shutdown(0)
