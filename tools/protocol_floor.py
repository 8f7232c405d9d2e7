"""What a request costs a bare server of each protocol Atoll's front ends speak, before any Atoll
code runs: an aiohttp server whose one POST route reads the body and answers a few bytes, and a
grpc.aio server whose one unary method (raw bytes in, a few bytes out) does the same. Each is
driven in closed loop from a process of its own, as `atoll bench serve` drives Atoll: the lean
HTTP client, or gRPC channels sending bytes encoded beforehand. The figure is the server
process's CPU-ms per request, for a JPEG-sized body (110 KB) and a ready 224x224 FP32 tensor
(602 KB). It is the floor under `bench serve --protocol http,grpc`: gRPC cannot serve as many
requests per core as HTTP where grpcio's own floor is the higher one.

Usage: python tools/protocol_floor.py [--seconds 8] [--out bench/results/protocol_floor_cpu.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from atoll.bench.cpustat import process_cpu_s  # noqa: E402

SIZES = {"jpeg_110kb": 110_000, "tensor_602kb": 3 * 224 * 224 * 4}
CONNECTIONS = 16
METHOD = "/floor.Floor/Echo"
ANSWER = b'{"ok":1}'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(protocol: str, port: int, ready) -> None:
    if protocol == "http":
        from aiohttp import web

        async def echo(request: web.Request) -> web.Response:
            await request.content.readexactly(request.content_length)
            return web.Response(body=ANSWER)

        app = web.Application(client_max_size=1 << 30)
        app.router.add_post("/infer", echo)

        async def main() -> None:
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            ready.set()
            await asyncio.Event().wait()
    else:
        import grpc

        from atoll.grpc_server import STREAM_WINDOW_BYTES

        async def echo(request: bytes, context) -> bytes:
            return ANSWER

        async def main() -> None:
            server = grpc.aio.server(options=[("grpc.max_receive_message_length", -1),
                                              ("grpc.http2.lookahead_bytes", STREAM_WINDOW_BYTES)])  # fmt: skip
            handler = grpc.unary_unary_rpc_method_handler(echo)
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("floor.Floor", {"Echo": handler}),))
            server.add_insecure_port(f"127.0.0.1:{port}")
            await server.start()
            ready.set()
            await asyncio.Event().wait()

    asyncio.run(main())


async def _drive(protocol: str, port: int, size: int, seconds: float) -> int:
    """Requests answered in `seconds` of closed loop on CONNECTIONS connections."""
    body = bytes(size)
    if protocol == "http":
        from atoll.bench.http_client import HttpClient

        client = HttpClient(f"http://127.0.0.1:{port}", 30.0, max_connections=CONNECTIONS)
        request = client.request("/infer", body, {"Content-Type": "application/octet-stream"})

        async def send() -> None:
            assert await client.send(request) == 200

        close = client.close
    else:
        from atoll.bench.loadproc import GRPC_CHANNELS, grpc_channels

        channels = grpc_channels(f"127.0.0.1:{port}")
        calls = [channel.unary_unary(METHOD) for channel in channels]

        async def send(k=iter(range(1 << 62))) -> None:
            await calls[next(k) % GRPC_CHANNELS](body, timeout=30.0)

        def close() -> None:
            pass

    answered = 0
    end = time.monotonic() + seconds

    async def client_loop() -> None:
        nonlocal answered
        while time.monotonic() < end:
            await send()
            answered += 1

    await asyncio.gather(*(client_loop() for _ in range(CONNECTIONS)))
    close()
    return answered


def _client(protocol: str, port: int, size: int, seconds: float, conn) -> None:
    asyncio.run(_drive(protocol, port, size, 1.0))  # imports done and the server warm before the clock
    conn.send("measuring")
    conn.send(asyncio.run(_drive(protocol, port, size, seconds)))


def measure(protocol: str, size: int, seconds: float) -> dict:
    ctx = multiprocessing.get_context("spawn")
    port, ready = _free_port(), ctx.Event()
    server = ctx.Process(target=_serve, args=(protocol, port, ready), daemon=True)
    server.start()
    try:
        if not ready.wait(60):
            raise RuntimeError(f"the {protocol} server did not start")
        parent, child = ctx.Pipe()
        client = ctx.Process(target=_client, args=(protocol, port, size, seconds, child), daemon=True)
        client.start()
        child.close()
        parent.recv()  # "measuring"
        before, t0 = process_cpu_s(server.pid), time.monotonic()
        answered = parent.recv()
        cpu, wall = process_cpu_s(server.pid) - before, time.monotonic() - t0
        client.join()
    finally:
        server.kill()
        server.join()
    return {"protocol": protocol, "body_bytes": size, "requests_per_s": round(answered / seconds, 1),
            "server_cpu_ms_per_request": round(cpu / answered * 1e3, 4), "server_cores": round(cpu / wall, 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=8.0, help="closed-loop seconds per measurement (default 8)")
    p.add_argument("--out", type=Path, default=Path("bench/results/protocol_floor_cpu.json"))
    args = p.parse_args()
    rows = []
    for name, size in SIZES.items():
        for protocol in ("http", "grpc"):
            row = {"body": name, **measure(protocol, size, args.seconds)}
            print(f"{protocol:>5} {name:>13}: {row['requests_per_s']:8.1f} req/s, "
                  f"{row['server_cpu_ms_per_request']:.3f} server CPU-ms a request", file=sys.stderr)
            rows.append(row)
    import grpc
    import aiohttp

    doc = {"tool": "protocol_floor", "device": "cpu", "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "cores": len(os.sched_getaffinity(0)), "connections": CONNECTIONS,
           "versions": {"aiohttp": aiohttp.__version__, "grpcio": grpc.__version__}, "results": rows}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
