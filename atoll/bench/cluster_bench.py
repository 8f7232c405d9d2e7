"""`atoll bench serve --cluster N`: the cluster endpoint over N local Atoll nodes, driven like any
system and beside one of its nodes driven directly with the same load, so each row says what the
endpoint costs (its CPU-ms per request, its added p50 and p99) and `--cluster 1,2` how throughput
grows from one node to two. The bench starts the local Ray cluster itself (with `--pin-nodes`, node
i's raylet, hence its Atoll node, on core i) and the endpoint as `atoll serve --cluster ADDRESS`;
cores are counted per party, each once: endpoint, nodes (their atoll serve trees), Ray, load."""

from __future__ import annotations

import os
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families
from tqdm import tqdm

from atoll.bench.cpustat import CpuMeter
from atoll.bench.servers import System, pinned, started
from atoll.cluster.local import NODE_ARGS, local_cluster
from atoll.cluster.membership import find_controller
from atoll.cluster.runtime import ClusterError, connected, wait_for_nodes

READY_TIMEOUT_S = 600.0  # a local cluster's start on a loaded 2-core VM: ~30 s, Ray's first start more
POLL_S = 0.5
NODE = "node "  # a node's party in CpuMeter: "node <name>"
ENDPOINT = "atoll-cluster-"  # the endpoint's rows: server "atoll-cluster-N"
DIRECT = "atoll-node"  # one node of the same cluster driven directly


@dataclass
class ClusterSystem(System):
    """The endpoint as `Bench` drives it (`pid` the endpoint's), `parties` (each node's atoll serve
    and Ray's processes, as CpuMeter takes them) and `direct`: one of its nodes as a system of its own."""

    nodes: int = 0
    parties: dict[str, list[int]] = field(default_factory=dict)
    direct: System | None = None

    def meter(self, load: list[int]) -> ClusterMeter:
        return ClusterMeter(CpuMeter({"endpoint": [self.pid], "load": load, **self.parties}))


class ClusterMeter:
    """A CpuMeter over the cluster's parties whose `stop()` counts each party once (`separated`)."""

    def __init__(self, meter: CpuMeter):
        self._meter = meter

    def start(self) -> None:
        self._meter.start()

    def stop(self) -> dict:
        return separated(self._meter.stop())


def separated(cpu: dict) -> dict:
    """Cores per party with each counted once: CpuMeter counts a root's descendants, so Ray's
    processes (the raylets start the workers that start the nodes) hold the nodes too. "server" is
    the whole cluster (endpoint + nodes + Ray), as it is a whole atoll serve's tree elsewhere."""
    if cpu["endpoint"] is None:  # no /proc
        return {"server": None, **cpu}
    per_node = {k.removeprefix(NODE): v for k, v in cpu.items() if k.startswith(NODE)}
    nodes = round(sum(per_node.values()), 3)
    ray = round(max(0.0, cpu["ray"] - nodes), 3)
    server = round(cpu["endpoint"] + nodes + ray, 3)
    return {"server": server, "endpoint": cpu["endpoint"], "nodes": nodes, "per_node": per_node, "ray": ray,
            "load": cpu["load"], "other": round(max(0.0, cpu["machine"] - server - cpu["load"]), 3),
            "machine": cpu["machine"]}  # fmt: skip


def counts(text: str) -> list[int]:
    """`--cluster`'s node counts ("1,2")."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise SystemExit(f"atoll bench serve: --cluster takes node counts >= 1, comma-separated; got {text!r}")
    return list(dict.fromkeys(values))


def node_cores(index: int, pin: bool) -> tuple[int, ...]:
    """The cores of node `index`'s raylet: core index (mod the cores we have) when pinned, else any."""
    cores = sorted(os.sched_getaffinity(0))
    return (cores[index % len(cores)],) if pin else ()


@contextmanager
def cluster(nodes: int, serve_args: list[str], pin: bool, endpoint_cpus: tuple[int, ...]):
    """A local Ray cluster of `nodes` raylets and `atoll serve --cluster` over it with `serve_args`,
    yielding a ClusterSystem once the endpoint routes to every node; all of it stopped at exit.
    RuntimeError (ClusterError) where Ray is missing or the nodes are not ready in time."""
    try:
        with pinned(node_cores(0, pin)):
            ray_cluster = local_cluster(1)
    except ModuleNotFoundError:  # Ray, the cluster extra, is absent
        raise ClusterError("Ray is not installed: pip install 'atoll[cluster]'") from None
    try:
        for i in range(1, nodes):
            with pinned(node_cores(i, pin)):  # its raylet starts its workers, so its Atoll node, there
                ray_cluster.add_node(**NODE_ARGS)
        with connected(ray_cluster.address), started(["--cluster", ray_cluster.address, *serve_args],
                                                     endpoint_cpus) as endpoint:  # fmt: skip
            addresses = wait_for_nodes(READY_TIMEOUT_S)
            _await_routes(endpoint.url, nodes)
            pids = _node_pids()
            ray_pids = [p.pid for node in ray_cluster.list_all_nodes() for _, p in node.live_processes()]
            first = addresses[0]
            direct = System(DIRECT, f"http://{first.http}", pids[first.name], {"node": first.name}, first.grpc)
            about = {"args": serve_args, "address": ray_cluster.address, "pinned": pin,
                     "node_cores": {name: sorted(os.sched_getaffinity(pid)) for name, pid in pids.items()}}  # fmt: skip
            yield ClusterSystem(f"{ENDPOINT}{nodes}", endpoint.url, endpoint.proc.pid, about, endpoint.grpc_address,
                                nodes, {**{f"{NODE}{n}": [p] for n, p in pids.items()}, "ray": ray_pids}, direct)  # fmt: skip
    finally:
        ray_cluster.shutdown()


def _node_pids() -> dict[str, int]:
    """Each Atoll node's `atoll serve` pid by node name, from its Ray actor."""
    import ray  # optional dependency: only the cluster needs it

    actors = ray.get(find_controller().actors.remote())
    return dict(zip(actors, ray.get([a.pid.remote() for a in actors.values()])))


def _await_routes(url: str, nodes: int) -> None:
    """Until the endpoint counts `nodes` ready nodes (its atoll_cluster_node_ready gauge)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while (ready := _ready_nodes(url)) < nodes:
        if time.monotonic() > deadline:
            raise ClusterError(f"the endpoint sees {ready} of {nodes} nodes ready after {READY_TIMEOUT_S:g} s")
        time.sleep(POLL_S)


def _ready_nodes(url: str) -> int:
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
            text = r.read().decode()
    except (urllib.error.URLError, OSError):  # not answering yet
        return 0
    return sum(round(s.value) for f in text_string_to_metric_families(text) if f.name == "atoll_cluster_node_ready"
               for s in f.samples)  # fmt: skip


def drive(bench, system: ClusterSystem, traffic, labels: dict) -> tuple[list[dict], dict]:
    """`bench.drive` through the endpoint, then the same load on one node directly; each endpoint
    row gets its cores per party and the endpoint's cost against the node's row at its load point."""
    rows, best = bench.drive(system, traffic, labels)
    direct, _ = bench.drive(system.direct, traffic, labels)
    by_point = {_point(r): r for r in direct}
    for row in rows:
        row["endpoint"] = endpoint_cost(row, by_point.get(_point(row)))
        row["cluster"] = system.about
        tqdm.write(_line(system.name, row), file=sys.stderr)
    for row in [*rows, *direct]:
        row["cluster_nodes"] = system.nodes
    return rows + direct, best


def _point(row: dict) -> tuple:
    return row["input"], row["protocol"], row["shm"], row["mode"], row["concurrency"], row["rate_rps"]


def endpoint_cost(row: dict, node: dict | None) -> dict:
    """The endpoint's CPU-ms per request answered (its process's CPU over the window / answers) and
    its added p50 and p99 against the node served directly at the same load point (None without)."""
    cores, rps = row["cpu_cores"].get("endpoint"), row["throughput_rps"]
    mine = row["latency_ms"]
    theirs = node["latency_ms"] if node else {}

    def added(q: str) -> float | None:
        return round(mine[q] - theirs[q], 2) if mine.get(q) is not None and theirs.get(q) is not None else None

    return {"cpu_ms_per_request": round(1000.0 * cores / rps, 3) if cores is not None and rps else None,
            "added_p50_ms": added("p50"), "added_p99_ms": added("p99"),
            "direct_p50_ms": theirs.get("p50"), "direct_p99_ms": theirs.get("p99"),
            "direct_throughput_rps": node["throughput_rps"] if node else None}  # fmt: skip


def scaling(rows: list[dict]) -> list[dict]:
    """Each larger cluster's throughput over the smallest's at every load point both ran, beside
    what limits it when it falls short: both clusters' cores per party, the endpoint's cost, and the
    throughput per core the nodes used (equal in both where the nodes scale with the cores they got)."""
    clusters = sorted({r["cluster_nodes"] for r in rows if r["server"].startswith(ENDPOINT)})
    endpoint = {(r["cluster_nodes"], _point(r)): r for r in rows if r["server"].startswith(ENDPOINT)}
    out = []
    for n in clusters[1:]:
        for (size, point), big in endpoint.items():
            small = endpoint.get((clusters[0], point))
            if size != n or small is None:
                continue
            rps = (small["throughput_rps"], big["throughput_rps"])
            per_core = [_per_node_core(small), _per_node_core(big)]
            out.append({"input": point[0], "protocol": point[1], "shm": point[2], "mode": point[3],
                        "concurrency": point[4], "rate_rps": point[5], "nodes": [clusters[0], n],
                        "throughput_rps": list(rps), "ratio": round(rps[1] / rps[0], 3) if rps[0] else None,
                        "cpu_cores": [small["cpu_cores"], big["cpu_cores"]],
                        "endpoint_cpu_ms_per_request": [small["endpoint"]["cpu_ms_per_request"],
                                                        big["endpoint"]["cpu_ms_per_request"]],
                        "loadgen_saturated": [small["loadgen"]["saturated"], big["loadgen"]["saturated"]],
                        "per_node_core_rps": per_core,
                        "per_node_core_ratio": round(per_core[1] / per_core[0], 3) if all(per_core) else None})  # fmt: skip
    return out


def _per_node_core(row: dict) -> float | None:
    """Requests answered per core the nodes used."""
    nodes = row["cpu_cores"].get("nodes")
    return round(row["throughput_rps"] / nodes, 1) if nodes else None


def _line(name: str, row: dict) -> str:
    e, cpu = row["endpoint"], row["cpu_cores"]
    load = f"{row['concurrency']} conn" if row["concurrency"] else f"{row['rate_rps']} req/s"
    return (f"{name} {row['input']} {row['protocol']} {load}: endpoint {e['cpu_ms_per_request']} CPU-ms/request, "
            f"p50 {_signed(e['added_p50_ms'])} ms, p99 {_signed(e['added_p99_ms'])} ms over the node directly; cores "
            f"endpoint "
            f"{cpu.get('endpoint')} nodes {cpu.get('per_node')} ray {cpu.get('ray')} load {cpu['load']} "
            f"other {cpu['other']}")  # fmt: skip


def _signed(ms: float | None) -> str:
    return "?" if ms is None else f"{ms:+.2f}"


def scaling_line(s: dict) -> str:
    return (f"{s['nodes'][1]} nodes vs {s['nodes'][0]}, {s['input']} {s['protocol']} "
            f"{s['concurrency'] or s['rate_rps']}: {s['throughput_rps'][1]} / {s['throughput_rps'][0]} req/s "
            f"= x{s['ratio']}; per core the nodes used {s['per_node_core_rps'][1]} / {s['per_node_core_rps'][0]} "
            f"(x{s['per_node_core_ratio']})")  # fmt: skip
