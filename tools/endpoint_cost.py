"""What the cluster endpoint alone costs per request: `atoll serve --cluster`'s endpoint
(`serve_endpoint` over a `StaticDirectory`) in front of a stand-in node that answers every infer
request with a fixed 4 KB answer, at once or after `--node-delay-ms` (Atoll's HTTP edge, no model:
20 ms gives 8 connections the ~400 req/s of a real node, each request its own wake-up), driven in
closed loop by the bench's load client from a process of its own. The figure is the endpoint
process's CPU-ms per request (user and system apart; the bench's `cpustat` gives only their sum)
for a 110 KB body (a web JPEG's size) and a 602 KB FP32 tensor, without the node's work on the
same cores and without Ray. The endpoint reaches the node through its local socket, as it does a
node on the same host, or with `--way tcp` over TCP, as it does one on another host. With several
`--tree`s (checkouts of Atoll) each point runs once per tree in turn, `--rounds` times, the
endpoint importing that tree's code: an interleaved before/after on a VM whose other tenants come
and go. Figures: docs/cluster.md.

Usage (PYTHONPATH set to a checkout, as for every tool):
    python tools/endpoint_cost.py [--tree DIR ...] [--rounds 3] [--seconds 5] [--connections 8]
        [--node-delay-ms 0] [--way local] [--way tcp] [--set server.endpoint_relay=python]
        [--out bench/results/cluster_endpoint_cost_cpu.json]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from atoll.bench.bodies import http_body
from atoll.bench.cpustat import stat_fields
from atoll.bench.http_client import HttpClient

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"jpeg_110kb": 110_000, "tensor_602kb": 3 * 224 * 224 * 4}
MODEL = "m"
ANSWER_BYTES = 4000  # MobileNetV3's 1,000 FP32 scores
READY_S = 60.0


def _node(port: int, delay_s: float) -> None:
    """The stand-in node: ready, one READY model in its index, every infer answered at once or
    after `delay_s`; on TCP and on a local socket, whose address it prints."""
    from atoll.http import local_socket
    from atoll.http.bodies import BodyLimits
    from atoll.http.connections import HttpConnections
    from atoll.http.edge import HttpServer
    from atoll.http.messages import HttpResponse, Routes

    header = json.dumps({"model_name": MODEL, "outputs": [{"name": "scores", "datatype": "FP32", "shape": [1, 1000],
                                                          "parameters": {"binary_data_size": ANSWER_BYTES}}]}).encode()
    answer = HttpResponse(200, header + bytes(ANSWER_BYTES), "application/octet-stream",
                          {"Inference-Header-Content-Length": str(len(header))})
    index = HttpResponse.json([{"name": MODEL, "version": "1", "state": "READY"}])
    routes = Routes()

    async def ready(request):
        return HttpResponse(200)

    async def listed(request):
        return index

    async def infer(request):
        if delay_s:
            await asyncio.sleep(delay_s)
        return answer

    routes.add("GET", "/v2/health/ready", ready)
    routes.add("POST", "/v2/repository/index", listed)
    routes.add("POST", "/v2/models/{model}/infer", infer)

    async def main() -> None:
        server = HttpServer(routes, BodyLimits(64 << 20, 30.0), HttpConnections(1024))
        await server.listen("127.0.0.1", port)
        sock, address = local_socket.listen(f"atoll-endpoint-cost-{os.getpid()}", 128)
        await server.listen_on(sock)
        print(f"ready {address}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def _endpoint(node_port: int, port: int, local: str, settings: list[str]) -> None:
    from atoll.cluster.directory import NodeAddress, StaticDirectory
    from atoll.cluster.endpoint import serve_endpoint
    from atoll.config import load_config

    nodes = StaticDirectory([NodeAddress("stand-in", f"127.0.0.1:{node_port}", "", "", local)])
    serve_endpoint(nodes, load_config(None, {"server.host": "127.0.0.1", "server.http_port": str(port),
                                             "server.grpc_port": "-1", "server.metrics_port": "-1",
                                             **dict(s.split("=", 1) for s in settings)}))  # fmt: skip


def _started(args: list[str], tree: str, ready: str) -> tuple[subprocess.Popen, str]:
    """The process and the rest of its line that says `ready`."""
    env = {**os.environ, "PYTHONPATH": tree}
    proc = subprocess.Popen([sys.executable, __file__, *args], cwd=tree, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    deadline = time.monotonic() + READY_S
    for line in proc.stdout:
        if ready in line:
            return proc, line.split(ready, 1)[1].strip()
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError(f"{args[0]} did not start (from {tree})")


async def _drive(port: int, size: int, connections: int, seconds: float, endpoint_pid: int, node_pid: int) -> dict:
    """Closed loop on `connections`; after a second's warm-up, the endpoint's CPU over `seconds`
    (and the stand-in node's: what the endpoint's way of sending costs the node's edge)."""
    client = HttpClient(f"http://127.0.0.1:{port}", 30.0)
    body, headers = http_body("x", "FP32", [size // 4], os.urandom(size))
    request = client.request(f"/v2/models/{MODEL}/infer", body, headers)
    answered, running = [0], [True]

    async def loop() -> None:
        while running[0]:
            status = await client.send(request)
            if status != 200:
                raise RuntimeError(f"the endpoint answered {status}")
            answered[0] += 1

    tasks = [asyncio.create_task(loop()) for _ in range(connections)]
    await asyncio.sleep(1.0)
    n0, cpu0, node0, t0 = answered[0], _cpu(endpoint_pid), _cpu(node_pid), time.monotonic()
    await asyncio.sleep(seconds)
    n1, cpu1, node1, t1 = answered[0], _cpu(endpoint_pid), _cpu(node_pid), time.monotonic()
    running[0] = False
    await asyncio.gather(*tasks)
    client.close()
    n = n1 - n0
    return {"requests": n, "throughput_rps": round(n / (t1 - t0), 1),
            "cpu_ms_per_request": round((cpu1[0] + cpu1[1] - cpu0[0] - cpu0[1]) * 1000 / n, 4),
            "user_ms_per_request": round((cpu1[0] - cpu0[0]) * 1000 / n, 4),
            "system_ms_per_request": round((cpu1[1] - cpu0[1]) * 1000 / n, 4),
            "node_cpu_ms_per_request": round((sum(node1) - sum(node0)) * 1000 / n, 4)}  # fmt: skip


def _cpu(pid: int) -> tuple[float, float]:
    """User and system seconds of process `pid`."""
    fields = stat_fields(Path(f"/proc/{pid}/stat").read_text())
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def measure(tree: str, size: int, connections: int, seconds: float, port: int, delay_ms: float, way: str,
            settings: list[str]) -> dict:  # fmt: skip
    """The endpoint's costs, sending to the node over `way` (tcp, or its local socket)."""
    node, local = _started(["--node", str(port), str(delay_ms)], tree, "ready")
    endpoint = None
    try:
        endpoint, _ = _started(["--endpoint", str(port), str(port + 1), local if way == "local" else "", *settings],
                               tree, "serving on")  # fmt: skip
        return asyncio.run(_drive(port + 1, size, connections, seconds, endpoint.pid, node.pid))
    finally:
        for proc in (endpoint, node):
            if proc is not None:
                proc.terminate()
                proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", help="an Atoll checkout whose endpoint is measured (repeatable; "
                        "default this one)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--out", default="")
    parser.add_argument("--node-delay-ms", type=float, default=0.0,
                        help="the stand-in node answers after this long: with --connections, the rate a real node's "
                             "latency sets, each request then a wake-up of its own (default 0: at once)")
    parser.add_argument("--way", action="append", choices=("local", "tcp"),
                        help="how the endpoint reaches the node: its local socket (what a node on the same host "
                             "gives out), or TCP as from another host (repeatable; default local)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of the endpoint's config, e.g. server.endpoint_relay=python (repeatable)")
    parser.add_argument("--node", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.node is not None:
        return _node(int(args.node[0]), float(args.node[1]) / 1000)
    if args.endpoint is not None:
        return _endpoint(int(args.endpoint[0]), int(args.endpoint[1]), args.endpoint[2], args.endpoint[3:])
    trees = [str(Path(t).resolve()) for t in args.tree or [ROOT]]
    ways = args.way or ["local"]
    runs: list[dict] = []
    port = 21000 + os.getpid() % 2000 * 2
    for r in range(args.rounds):
        for name, size in SIZES.items():
            for tree, way in itertools.product(trees, ways):
                commit = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True,
                                        text=True).stdout.strip()  # fmt: skip
                point = measure(tree, size, args.connections, args.seconds, port, args.node_delay_ms, way, args.set)
                runs.append({"round": r + 1, "body": name, "tree": tree, "commit": commit, "way": way, **point,
                             "load_avg_1min": os.getloadavg()[0]})  # fmt: skip
                print(json.dumps(runs[-1]), flush=True)
    summary = {f"{name} {way} {tree}": statistics.median(p["cpu_ms_per_request"] for p in runs
                                                         if (p["body"], p["tree"], p["way"]) == (name, tree, way))
               for name in SIZES for tree, way in itertools.product(trees, ways)}  # fmt: skip
    result = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cores": os.cpu_count(),
              "connections": args.connections, "node_delay_ms": args.node_delay_ms, "seconds": args.seconds,
              "settings": args.set,
              "median_cpu_ms_per_request": summary, "runs": runs}  # fmt: skip
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
