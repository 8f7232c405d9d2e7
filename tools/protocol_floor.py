"""What a request costs a bare server of each protocol Atoll's front ends speak, before any Atoll
code runs: one POST route answering a few bytes once the body is read, on Atoll's HTTP edge
(`edge.HttpServer`) and on aiohttp, and a grpc.aio unary method doing the same. The figure is the
server's CPU-ms per request for a 110 KB body and a 602 KB tensor, driven in closed loop from a
process of its own as `atoll bench serve` drives Atoll. `atoll-refusal` is Atoll's HTTP server
refusing every request at admission: what Atoll adds to a refusal; `atoll-answer` the same server
answering each request with the model's output from a front end that has it at once: what the
front end's loop spends on a served request beside its rows (edge, routes, admission, timeout,
metrics, the answer's encoding). Servers run with `atoll serve`'s
glibc heap settings (`supervisor.process_settings.HEAP_TUNING`), without which a body of 128 KB or more is a fresh
mmap whose page faults cost more than the protocol. Figures: docs/benchmarks.md, docs/http-edge.md.

Usage: python tools/protocol_floor.py [--seconds 8] [--case atoll-answer ...] [--out bench/results/protocol_floor_cpu.json]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import os
import socket
import sys
import time
from pathlib import Path

import aiohttp
import grpc
import httptools
import numpy as np
from aiohttp import web

from atoll.bench.bodies import infer_body
from atoll.bench.corpus import jpeg_bytes
from atoll.bench.http_client import HttpClient
from atoll.bench.loadproc import grpc_channels
from atoll.front_end.endpoints import Endpoints
from atoll.front_end.http_routes import InferenceServer
from atoll.http.bodies import BodyLimits
from atoll.http.connections import HttpConnections
from atoll.http.edge import HttpServer
from atoll.http.messages import HttpResponse, Routes
from atoll.kserve.datatypes import DTYPES
from atoll.kserve.grpc_calls import STREAM_WINDOW_BYTES
from atoll.kserve.shm_registry import Regions
from atoll.observe.metrics import Metrics
from atoll.repository.demo import demo_repository
from atoll.repository.specs import load_repository
from atoll.supervisor.process_settings import HEAP_TUNING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from atoll.bench.cpustat import process_cpu_s

SIZES = {"jpeg_110kb": 110_000, "tensor_602kb": 3 * 224 * 224 * 4}
MODEL = "mobilenet_v3_small"
PATH = f"/v2/models/{MODEL}/infer"
CONNECTIONS = 16
METHOD = "/floor.Floor/Echo"
ANSWER = b'{"ok":1}'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _infer_request() -> tuple[bytes, dict[str, str]]:
    """What `atoll-refusal` is sent: a real infer request carrying one 640x480 JPEG."""

    return infer_body("image", [jpeg_bytes(640, 480, seed=1)])


def _atoll_server(refusing: bool):
    """Atoll's HTTP server over a front end that answers each request at once with the model's
    output (zeros); `refusing`: its admission refuses everything (each priority's one place taken)."""

    class FrontEnd:
        models = {MODEL: load_repository(str(demo_repository()))[MODEL]}
        outputs = {t.name: np.zeros((1, *t.dims), DTYPES[t.datatype]) for t in models[MODEL].outputs}

        async def infer(self, spec, request, priority, deadline):
            return self.outputs

    endpoints = Endpoints(FrontEnd(), Metrics(), Regions(), max_pending=1 if refusing else 0, timeout_s=2.0)
    endpoints.ready = True
    for admission in endpoints.admission.values() if refusing else ():
        admission.started(time.monotonic())
    return InferenceServer(endpoints, endpoints.metrics).http(64 << 20, HttpConnections(CONNECTIONS * 4))


def _serve(protocol: str, port: int, ready) -> None:
    if protocol == "aiohttp":
        async def echo(request: web.Request) -> web.Response:
            await request.content.readexactly(request.content_length)
            return web.Response(body=ANSWER)

        app = web.Application(client_max_size=1 << 30)
        app.router.add_post(PATH, echo)

        async def main() -> None:
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            ready.set()
            await asyncio.Event().wait()
    elif protocol != "grpc":
        async def answer(request) -> HttpResponse:
            return HttpResponse(body=ANSWER)

        if protocol == "http":
            routes = Routes()
            routes.add("POST", PATH, answer)
            server = HttpServer(routes, BodyLimits(1 << 30, 30.0), HttpConnections(CONNECTIONS * 4))
        else:
            server = _atoll_server(refusing=protocol == "atoll-refusal")

        async def main() -> None:
            await server.listen("127.0.0.1", port)
            ready.set()
            await asyncio.Event().wait()
    else:

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
    if protocol != "grpc":
        client = HttpClient(f"http://127.0.0.1:{port}", 30.0, max_connections=CONNECTIONS)
        if protocol in ("http", "aiohttp"):
            request, expected = client.request(PATH, body, {"Content-Type": "application/octet-stream"}), 200
        else:
            request, expected = client.request(PATH, *_infer_request()), 503 if protocol == "atoll-refusal" else 200

        async def send() -> None:
            assert await client.send(request) == expected

        async def close() -> None:
            client.close()
    else:
        channels = grpc_channels(f"127.0.0.1:{port}")
        calls = itertools.cycle([channel.unary_unary(METHOD) for channel in channels])

        async def send() -> None:
            await next(calls)(body, timeout=30.0)

        async def close() -> None:
            await asyncio.gather(*(channel.close() for channel in channels))

    answered = 0
    end = time.monotonic() + seconds

    async def client_loop() -> None:
        nonlocal answered
        while time.monotonic() < end:
            await send()
            answered += 1

    await asyncio.gather(*(client_loop() for _ in range(CONNECTIONS)))
    await close()
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
    p.add_argument("--case", action="append", default=[], metavar="PROTOCOL",
                   help="measure only these rows (http, aiohttp, grpc, atoll-refusal, atoll-answer; repeatable)")
    p.add_argument("--out", type=Path, default=Path("bench/results/protocol_floor_cpu.json"))
    args = p.parse_args()

    os.environ.update(HEAP_TUNING)  # the servers run with the glibc settings `atoll serve` gives its front ends
    rows = []
    cases = [*((name, protocol) for name in SIZES for protocol in ("http", "aiohttp", "grpc")),
             ("infer_request", "atoll-refusal"), ("infer_request", "atoll-answer")]  # fmt: skip
    for name, protocol in cases:
        if args.case and protocol not in args.case:
            continue
        row = {"body": name, **measure(protocol, SIZES.get(name, 0), args.seconds)}
        if protocol.startswith("atoll-"):
            row["body_bytes"] = len(_infer_request()[0])
        print(f"{protocol:>13} {name:>13}: {row['requests_per_s']:8.1f} req/s, "
              f"{row['server_cpu_ms_per_request']:.3f} server CPU-ms a request", file=sys.stderr)
        rows.append(row)

    doc = {"tool": "protocol_floor", "device": "cpu", "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "cores": len(os.sched_getaffinity(0)), "connections": CONNECTIONS,
           "versions": {"httptools": httptools.__version__, "aiohttp": aiohttp.__version__, "grpcio": grpc.__version__},
           "results": rows}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
