"""`atoll bench robust`: what hostile media, slow clients, connection floods, overload and dead
processes cost `atoll serve` (ARCHITECTURE §3.4), in one run (the flood on a second server).

Steps: bomb (JPEGs whose headers claim far more than they hold: time to each 400, extra peak memory),
json (`--json-requests` concurrent `--json-mb` JSON bodies, wrong shape then right: `robust_json`),
slow (a good client's throughput beside `--slow` connections holding bodies open), flood (the same
beside `--flood` idle and half-sent connections, on a server bounded to `--flood-bound`), overload
(open loop at `--overload` x capacity: every request answered once, goodput over capacity), storm
(`--storm` connections resending refusals at once), kill (SIGKILL of each child kind: time to the
next success, readiness meanwhile). Capacity is the mean of closed loops right before and after the
overload, at the connections a ladder chose (why: docs/robustness.md, which details each step).
"""

from __future__ import annotations

import os
import signal
import socket
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gpu_runtime.zoo import build
from gpu_runtime.zoo.repository import write_model

from atoll.bench.bodies import infer_body, media_bytes
from atoll.bench.corpus import jpeg_bomb, jpeg_bytes, jpeg_scan_bomb
from atoll.bench.cpustat import CpuMeter
from atoll.bench.harness import emit
from atoll.bench.loadproc import LoadPlan, LoadProcesses, Request, split
from atoll.bench.robust_json import json_step, peak_rss_mb, wide_model
from atoll.bench.robust_json import summary as json_summary
from atoll.supervisor.server_process import ServerProcess
from atoll.bench.servers import add_loadgen_options, counter_total, split_cores, started
from atoll.http.connections import raise_open_file_limit

MODEL = "mobilenet_v3_small"
KINDS = ("front_end", "vgpu")


def register(subparsers) -> None:
    p = subparsers.add_parser("robust", help="hostile media, slow clients, connection floods, overload and killed children (#13)")
    p.add_argument("--slow", type=int, default=300, help="slow connections held open (default 300)")
    p.add_argument("--flood", type=int, default=1024,
                   help="idle connections, and as many half-sent ones, opened against the flood server (default 1024)")
    p.add_argument("--flood-bound", type=int, default=256,
                   help="the flood server's server.max_connections (default 256)")
    p.add_argument("--concurrency", type=int, default=8,
                   help="closed-loop connections of the good client, and the first step of the capacity ladder (default 8)")
    p.add_argument("--duration", type=float, default=15.0, help="seconds per throughput measurement (default 15)")
    p.add_argument("--overload", type=float, default=3.0, help="open-loop rate over capacity (default 3)")
    p.add_argument("--overload-s", type=float, default=60.0, help="seconds of overload (default 60)")
    p.add_argument("--storm", type=int, default=256,
                   help="closed-loop connections resending refused requests at once (default 256)")
    p.add_argument("--request-timeout", type=float, default=2.0, help="the server's request_timeout_s (default 2)")
    p.add_argument("--json-requests", type=int, default=4, help="concurrent large JSON requests (default 4)")
    p.add_argument("--json-mb", type=float, default=60.0, help="size of each large JSON request (default 60 MB)")
    add_loadgen_options(p)
    p.add_argument("--out", type=Path, default=Path("bench/results/robust_cpu.json"),
                   help="results JSON (default bench/results/robust_cpu.json)")
    p.add_argument("--json", action="store_true", help="print the results JSON on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    server_cpus, load_cpus, procs = split_cores(args, "robust")
    load = Load(load_cpus, procs)
    with tempfile.TemporaryDirectory(prefix="atoll-robust-") as root:
        write_model(Path(root), MODEL, build(MODEL))
        json_elements = int(args.json_mb * 1e6 / 5)
        wide_model(Path(root), json_elements)
        serve = ["--repository", root, "--backend", "cpu", "--set", f"server.request_timeout_s={args.request_timeout:g}"]
        with started(serve, server_cpus) as server:
            doc = {"server_args": serve, "cores": len(os.sched_getaffinity(0)), "server_cores": list(server_cpus) or "all",
                   "loadgen_cores": list(load_cpus) or "all", "loadgen_processes": procs, "bomb": _bomb(server),
                   "json": json_step(server, args.json_requests, json_elements)}  # fmt: skip
            alone = _closed_loop(server, load, args.concurrency, args.duration)
            slow = _with_connections(server, 0, args.slow,
                                     lambda: _closed_loop(server, load, args.concurrency, args.duration))
            doc["slow"] = {"connections": args.slow, "alone_rps": alone["rps"], "alone_cores": alone["cores"],
                           "with_slow_rps": slow["rps"]["rps"], "with_slow_cores": slow["rps"]["cores"],
                           "ratio": round(slow["rps"]["rps"] / alone["rps"], 3),
                           "slow_answers": slow["answers"]["half_sent"]}  # fmt: skip
            ladder = _ladder(server, load, alone, args.concurrency, args.duration)
            doc["overload"] = _overload(server, load, ladder, args.overload, args.overload_s, args.duration)
            doc["storm"] = _storm(server, load, doc["overload"]["capacity_rps"], args.storm, args.duration)
            doc["kill"] = {kind: _kill(server, kind) for kind in KINDS}
        with started([*serve, "--set", f"server.max_connections={args.flood_bound}"], server_cpus) as server:
            doc["flood"] = _flood(server, load, args)
    b, s, o, f, st = doc["bomb"], doc["slow"], doc["overload"], doc["flood"], doc["storm"]
    summary = [f"bomb: 400 in {b['one']['median_ms']} ms (32 in a request: {b['thirty_two']['median_ms']} ms; "
               f"1,000 scans: {b['scans']['median_ms']} ms), +{b['extra_peak_rss_mb']} MB peak RSS",
               *json_summary(doc["json"]),
               f"slow: {s['with_slow_rps']} vs {s['alone_rps']} req/s alone with {s['connections']} slow connections "
               f"({s['ratio']:.0%})",
               f"flood: {f['with_flood_rps']} vs {f['alone_rps']} req/s alone beside {f['idle']} idle and "
               f"{f['half_sent']} half-sent connections ({f['ratio']:.0%}; bound {f['bound']}, "
               f"{f['evicted']} closed to make room)",
               f"overload {o['factor']:g}x for {o['seconds']:g} s: goodput {o['goodput_rps']} req/s = "
               f"{o['goodput_over_capacity']:.0%} of {o['capacity_rps']} (closed loops of {o['capacity_connections']} "
               f"before and after: {' and '.join(map(str, o['capacity_before_after_rps']))}; "
               f"{o['goodput_per_server_core_over_capacity']} per server core, the server had {o['cores']['server']} cores); "
               f"unanswered {o['unanswered']}",
               f"storm of {st['connections']} connections resending at once: goodput {st['goodput_rps']} req/s = "
               f"{st['goodput_over_capacity']:.0%} of capacity; {st['statuses'].get('503', 0)} refusals, "
               f"{st['held']:g} of them held to the pace",
               *(f"kill {kind}: requests succeed again after {k['recovered_s']} s, successor after {k['successor_s']} s, "
                 f"readiness false meanwhile: {k['readiness_false_seen']}" for kind, k in doc["kill"].items())]  # fmt: skip
    emit(doc, args.out, args.json, summary)
    return 0


def _post(url: str, body: bytes, headers: dict, timeout_s: float = 60.0) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=timeout_s) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        e.read()
        return e.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return -1


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return -1


def _bomb(server: ServerProcess, reps: int = 20) -> dict:
    url = f"{server.url}/v2/models/{MODEL}/infer"
    fronts = server.children()["front_end"]
    before = peak_rss_mb(fronts)
    doc = {"file_bytes": len(jpeg_bomb()), "scans_file_bytes": len(jpeg_scan_bomb())}
    for name, files in (("one", [jpeg_bomb()]), ("thirty_two", [jpeg_bomb()] * 32), ("scans", [jpeg_scan_bomb()])):
        body, headers = infer_body("image", files)
        times, statuses = [], set()
        for _ in range(reps):
            start = time.perf_counter()
            statuses.add(_post(url, body, headers))
            times.append(time.perf_counter() - start)
        doc[name] = {"statuses": sorted(statuses), "median_ms": round(statistics.median(times) * 1e3, 2),
                     "max_ms": round(max(times) * 1e3, 2)}  # fmt: skip
    after = peak_rss_mb(fronts)
    doc["extra_peak_rss_mb"] = round(max(after[p] - before[p] for p in fronts), 1)
    return doc


@dataclass(frozen=True)
class Load:
    """Where the load processes run (`servers.split_cores`): their cores (empty: any) and how many."""

    cpus: tuple[int, ...]
    procs: int


def _plans(server: ServerProcess, load: Load, seconds: float, **points) -> list[LoadPlan]:
    body = jpeg_bytes(640, 480, seed=1)
    request = Request(0, MODEL, "image", "BYTES", (1, 1), media_bytes([body]), 0)
    return split(LoadPlan(server.url, (request,), (1.0,), seconds, timeout_s=60.0, cpus=load.cpus, **points), load.procs)


def _drive(server: ServerProcess, plans: list[LoadPlan]) -> tuple[np.ndarray, float, dict]:
    """The load's records, its start, and the cores the server and the load used meanwhile, the
    server's also split by kind of process (the supervisor is what its children leave of it)."""
    children = server.children()
    seconds = plans[0].seconds
    with LoadProcesses(plans) as load:
        meter = CpuMeter({"server": [server.proc.pid], "load": load.pids})
        by_kind_meter = CpuMeter({kind: sorted(children[kind]) for kind in KINDS})
        meter.start()
        by_kind_meter.start()
        start = load.go()
        while time.monotonic() < start + seconds:
            time.sleep(0.05)
        cores = meter.stop()
        by_kind = by_kind_meter.stop()
        records = load.records()
    if cores["server"] is not None:
        kinds = {kind: by_kind[kind] for kind in KINDS}
        cores["server_by_kind"] = {**kinds, "supervisor": round(max(0.0, cores["server"] - sum(kinds.values())), 3)}
    return records, start, cores


def _closed_loop(server: ServerProcess, load: Load, concurrency: int, seconds: float) -> dict:
    records, start, cores = _drive(server, _plans(server, load, seconds, concurrency=concurrency))
    within = records[records["done"] <= start + seconds]
    statuses = {str(k): int(n) for k, n in zip(*np.unique(within["status"], return_counts=True))}
    return {"rps": round(statuses.get("200", 0) / seconds, 1), "cores": cores, "statuses": statuses}


def _ladder(server: ServerProcess, load: Load, first: dict, concurrency: int, seconds: float, most: int = 256) -> dict:
    """The connections that serve most: of `first` (measured at `concurrency`) and the closed
    loops at twice as many connections, and twice again, while throughput grows by 5 % a step."""
    ladder = {concurrency: first}
    best = concurrency
    while concurrency < most:
        concurrency *= 2
        ladder[concurrency] = step = _closed_loop(server, load, concurrency, seconds)
        if step["rps"] > ladder[best]["rps"]:
            previous, best = best, concurrency
            if step["rps"] >= 1.05 * ladder[previous]["rps"]:
                continue
        break
    return {"concurrency": best, "rps": {str(c): m["rps"] for c, m in ladder.items()}}


def _with_connections(server: ServerProcess, idle: int, half_sent: int, measure) -> dict:
    """`measure()` while `idle` connections send nothing and `half_sent` ones each hold a request
    body open after its first byte; what became of each kind once released: answered (by status),
    closed by the server, or still waiting."""
    raise_open_file_limit()  # a socket each
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    socks = {"idle": [], "half_sent": []}
    for kind, count in (("idle", idle), ("half_sent", half_sent)):
        for _ in range(count):
            sock = socket.create_connection((host, int(port)), timeout=120)
            if kind == "half_sent":
                sock.sendall(f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{{".encode())
            socks[kind].append(sock)
    try:
        rps = measure()
    finally:
        answers = {}
        for kind, group in socks.items():
            answers[kind] = {}
            for sock in group:
                sock.setblocking(False)
                try:
                    head = sock.recv(64).decode(errors="replace").split(" ")
                    key = head[1] if len(head) > 1 else "closed"
                except BlockingIOError:  # still waiting: it held only its connection
                    key = "waiting"
                except ConnectionError:
                    key = "closed"
                answers[kind][key] = answers[kind].get(key, 0) + 1
                sock.close()
    return {"rps": rps, "answers": answers}


def _flood(server: ServerProcess, load: Load, args) -> dict:
    alone = _closed_loop(server, load, args.concurrency, args.duration)
    evicted = counter_total(server.url, "atoll_connections_evicted")
    flood = _with_connections(server, args.flood, args.flood,
                              lambda: _closed_loop(server, load, args.concurrency, args.duration))
    return {"bound": args.flood_bound, "idle": args.flood, "half_sent": args.flood, "alone_rps": alone["rps"],
            "with_flood_rps": flood["rps"]["rps"], "ratio": round(flood["rps"]["rps"] / alone["rps"], 3),
            "with_flood_statuses": flood["rps"]["statuses"], "answers": flood["answers"],
            "evicted": counter_total(server.url, "atoll_connections_evicted") - evicted}  # fmt: skip


def _overload(server: ServerProcess, load: Load, ladder: dict, factor: float, seconds: float,
              capacity_s: float) -> dict:
    """The capacity is the mean of closed loops at the ladder's best concurrency (`_ladder`) just
    before and just after the overload (`capacity_s` each); its cores are reported beside the
    overload's: on a small machine the open loop's client takes cores from the server."""
    before = _closed_loop(server, load, ladder["concurrency"], capacity_s)
    rate = factor * before["rps"]
    records, start, cores = _drive(server, _plans(server, load, seconds, rate=rate))
    after = _closed_loop(server, load, ladder["concurrency"], capacity_s)
    capacity = (before["rps"] + after["rps"]) / 2
    capacity_cores = (before["cores"]["server"] + after["cores"]["server"]) / 2 if before["cores"]["server"] and after["cores"]["server"] else None
    statuses, counts = np.unique(records["status"], return_counts=True)
    ok = records["status"] == 200
    span = float(records["done"].max()) - start  # until the last answer: the tail counts, as its time does
    goodput = float(ok.sum()) / span
    return {"factor": factor, "seconds": seconds, "capacity_rps": round(capacity, 1),
            "capacity_before_after_rps": [before["rps"], after["rps"]], "capacity_connections": ladder["concurrency"],
            "capacity_ladder_rps": ladder["rps"], "offered_rps": round(rate, 1),
            "sent": int(len(records)), "statuses": {str(s): int(c) for s, c in zip(statuses, counts)},
            "unanswered": int((records["status"] < 0).sum()),
            "goodput_rps": round(goodput, 1), "goodput_over_capacity": round(goodput / capacity, 3),
            "cores": cores, "capacity_cores": {"before": before["cores"], "after": after["cores"]},
            "goodput_per_server_core_over_capacity": round(goodput / cores["server"] / (capacity / capacity_cores), 3)
            if cores["server"] and capacity_cores else None,
            "p99_ok_ms": round(float(np.percentile(records["done"][ok] - records["scheduled"][ok], 99)) * 1e3, 1)
            if ok.any() else None}  # fmt: skip


def _storm(server: ServerProcess, load: Load, capacity: float, connections: int, seconds: float) -> dict:
    """A closed loop past what admission lets in: the connections it refuses resend at once."""
    held = counter_total(server.url, "atoll_refusals_held") or 0.0
    storm = _closed_loop(server, load, connections, seconds)
    return {"connections": connections, "seconds": seconds, "capacity_rps": capacity,
            "goodput_rps": storm["rps"], "goodput_over_capacity": round(storm["rps"] / capacity, 3),
            "statuses": storm["statuses"], "held": (counter_total(server.url, "atoll_refusals_held") or 0.0) - held,
            "cores": storm["cores"]}  # fmt: skip


def _kill(server: ServerProcess, kind: str, patience_s: float = 120.0) -> dict:
    url = f"{server.url}/v2/models/{MODEL}/infer"
    body, headers = infer_body("image", [jpeg_bytes(320, 240, seed=2)])
    results, ready, stop = [], [], threading.Event()

    def client() -> None:
        while not stop.is_set():
            sent = time.monotonic()
            results.append((sent, _post(url, body, headers)))

    def readiness() -> None:
        while not stop.is_set():
            ready.append((time.monotonic(), _status(f"{server.url}/v2/health/ready")))
            time.sleep(0.02)

    threads = [threading.Thread(target=f, daemon=True) for f in (client, client, readiness)]
    for t in threads:
        t.start()
    while not any(status == 200 for _, status in results):
        time.sleep(0.05)
    before = counter_total(server.url, "atoll_worker_restarts", kind=kind)
    victims = server.children()[kind]
    victim = min(victims)
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    recovered = successor = None
    while time.monotonic() - killed < patience_s and (recovered is None or successor is None):
        if recovered is None:
            recovered = next((sent for sent, status in list(results) if sent > killed and status == 200), None)
        now = server.children()[kind]
        if successor is None and len(now) == len(victims) and victim not in now:
            successor = time.monotonic()
        time.sleep(0.02)
    stop.set()
    for t in threads:
        t.join()
    after_kill = [status for sent, status in results if sent > killed]
    return {"victim_pid": victim,
            "recovered_s": round(recovered - killed, 2) if recovered else None,
            "successor_s": round(successor - killed, 2) if successor else None,
            "readiness_false_seen": any(status != 200 for t, status in ready if t > killed),
            "restarts_counted": counter_total(server.url, "atoll_worker_restarts", kind=kind) - before,
            "statuses_after_kill": {str(s): after_kill.count(s) for s in sorted(set(after_kill))}}  # fmt: skip
