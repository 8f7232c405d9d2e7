"""A `grpc_server` on a free local port over the given `Endpoints`, for tests that talk to it
through a real `grpc.aio` channel in this process."""

from __future__ import annotations

import contextlib
import socket

import grpc

from atoll.front_end import grpc_service


@contextlib.asynccontextmanager
async def grpc_channel(endpoints, pace=None):
    """A channel to a gRPC server serving `endpoints` (its UNAVAILABLE answers paced by `pace`);
    the server stops on leaving."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = await grpc_service.start(endpoints, "127.0.0.1", port, 1 << 20, pace=pace)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        await server.stop(None)
