"""A front-end process's life: serve HTTP on the shared port over a `FrontEnd`, until the
supervisor says stop (or goes away), then answer what is in flight and exit."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from aiohttp import web

from gpu_runtime.priority import favour_real_time_threads

from atoll import channel
from atoll.channel import Done, Health, Hello, Stop
from atoll.front_end import FrontEnd, FrontEndSetup
from atoll.metrics import Metrics
from atoll.server import InferenceServer


def front_end_main(setup: FrontEndSetup, sock) -> None:
    """Process entry point. Ctrl-C reaches the whole process group; the supervisor handles it and
    stops the front ends in order, so SIGINT is ignored here."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    favour_real_time_threads()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s fe{setup.index} %(name)s: %(message)s")
    asyncio.run(_serve(setup, sock))


async def _serve(setup: FrontEndSetup, sock) -> None:
    c = setup.config
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    metrics = Metrics()
    front_end = FrontEnd(setup, writer, metrics)
    share = -(-c.server.max_pending_requests // setup.count)  # 0 stays 0: no fixed bound
    server = InferenceServer(front_end, setup.models, metrics, share, c.server.request_timeout_s,
                             c.server.body_timeout_s)  # fmt: skip
    # handler_cancellation: a client that goes away cancels its request (aiohttp would run it on)
    runner = web.AppRunner(server.app(c.server.max_request_bytes), access_log=None, handler_cancellation=True,
                           shutdown_timeout=c.server.request_timeout_s)  # fmt: skip
    await runner.setup()
    await web.TCPSite(runner, c.server.host, setup.port, reuse_port=True).start()
    writer.write(channel.encode(Hello(setup.index, os.getpid())))
    server.ready = True
    stopping = asyncio.Event()
    listener = asyncio.create_task(_listen(reader, front_end, server, stopping))
    try:
        await stopping.wait()
        server.ready = False
        await runner.cleanup()  # answers what is in flight: Done messages still arrive meanwhile
    finally:
        listener.cancel()
        writer.close()
        front_end.close()


async def _listen(reader: asyncio.StreamReader, front_end: FrontEnd, server: InferenceServer,
                  stopping: asyncio.Event) -> None:
    while (message := await channel.receive(reader)) is not None:
        match message:
            case Done():
                front_end.on_done(message)
            case Health(ready_models=models):
                server.set_ready_models(models)
            case Stop():
                stopping.set()
    stopping.set()  # the supervisor is gone
