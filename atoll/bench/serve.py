"""`atoll bench serve`: end-to-end serving throughput and latency (PREBA Fig. 17/18), beside the
servers users pick instead and beside "Ideal", in one run.

It starts `atoll serve` (or drives `--url`) and, with `--baseline`, the plain Python server and
Triton on the same cores, one after another, and sends each the same pre-encoded requests from load
processes of their own (`loadproc`), over HTTP or gRPC (`--protocol`), in the requests or in system
shared memory (`--shm`): open-loop `--rate`s, a `--sweep` for the highest rate whose p99 meets
`--slo-ms`, or closed-loop `--concurrency`. `ideal_rps` is the executor alone on the same vGPUs at
Batch_knee (`ideal`). Every row says who used the cores and whether the load generator kept up.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
from batching import BATCHERS
from fpga_host import BACKEND_CHOICES
from gpu_runtime.executors import EXECUTOR_CHOICES
from scheduler.policies import POLICIES
from tqdm import tqdm

from atoll.bench import cluster_bench, python_identity, servers, triton_baseline, triton_sweep
from atoll.bench import traffic as traffic_mod
from atoll.bench.cpu_account import ThreadMeter
from atoll.bench.cpustat import CpuMeter
from atoll.bench.harness import emit, percentiles
from atoll.bench.ideal import measure_ideal, served_vgpus
from atoll.bench.loadproc import TRANSPORTS, LoadPlan, LoadProcesses, split
from atoll.bench.serve_analysis import class_latencies, loadgen_saturated, plot, summarise, sweep
from atoll.bench.servers import add_loadgen_options, counter_total, split_cores
from atoll.bench.traffic import weights_of
from atoll.config import SERVE_FLAGS, ConfigError, add_config_options, config_from_args
from atoll.repository.demo import demo_repository
from atoll.repository.specs import RepositoryError, load_repository

SYSTEMS = ("plain", "triton")
DEFAULTS = {"duration": 10.0, "warmup": 3.0, "slo_ms": 100.0}
PROBE_CONCURRENCY = 64  # closed-loop probe that sets the sweep's first rate


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="end-to-end serving throughput/latency vs baselines and Ideal")
    p.add_argument("--url", help="drive this running server instead of starting `atoll serve`")
    p.add_argument("--repository", help="model repository (default: the built-in demo)")
    p.add_argument("--mix", help="models and shares, e.g. mobilenet_v3_small=0.8,citrinet=0.2 "
                                 "(default: the first image model)")
    p.add_argument("--rt-share", type=float, default=0.0,
                   help="share of requests sent real-time (Triton priority 1; default 0)")
    p.add_argument("--images", choices=("web", "camera"), default="web",
                   help="JPEG sizes: web 0.1-0.5 MP, camera up to 12 MP (default web)")
    p.add_argument("--input", choices=("media", "tensor", "both"), default="media",
                   help="send JPEG/WAV files, ready FP32 tensors (no preprocessing), or both")
    p.add_argument("--protocol", default="http",
                   help="http, grpc (unary ModelInfer), grpc-stream (ModelStreamInfer, a stream per "
                        "connection), comma-separated: each is measured (default http)")
    p.add_argument("--shm", nargs="?", const="on", default="off", choices=("off", "on", "both"),
                   help="inputs in system shared memory (Triton's extension; the load processes register "
                        "a region per request): on, or both with and without (default off)")
    p.add_argument("--grpc-address", help="the gRPC host:port of the server at --url")
    p.add_argument("--cluster", metavar="N[,N]",
                   help="instead of one atoll serve, the cluster endpoint (atoll serve --cluster) over N local "
                        "Atoll nodes (a local Ray cluster), and one of its nodes directly with the same load: "
                        "the endpoint's CPU-ms per request and added latency; 1,2: also 2 nodes' throughput over 1's")
    p.add_argument("--pin-nodes", action="store_true",
                   help="with --cluster: node i (its raylet and atoll serve) on core i alone, so nodes do not "
                        "share cores; the endpoint and the load generator on any core")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--rate", help="open-loop Poisson rates in req/s, comma-separated")
    load.add_argument("--sweep", action="store_true",
                      help="find the highest rate whose p99 meets --slo-ms (the default)")
    load.add_argument("--concurrency", help="closed-loop connections, comma-separated")
    p.add_argument("--slo-ms", type=float, default=DEFAULTS["slo_ms"], help="p99 SLO of --sweep (default 100)")
    p.add_argument("--duration", type=float, default=DEFAULTS["duration"],
                   help="measured seconds per load point (default 10)")
    p.add_argument("--warmup", type=float, default=DEFAULTS["warmup"],
                   help="seconds of load before the measurement window (default 3)")
    p.add_argument("--baseline", action="append", default=[], choices=SYSTEMS,
                   help="also drive this server with the same load: plain (one Python process per core, "
                        "OpenCV + onnxruntime, no batching) or triton (nvidia-pytriton's tritonserver); repeatable")
    p.add_argument("--triton-sweep", action=argparse.BooleanOptionalAction, default=True,
                   help="serve Triton at each load point with the best of a few settings (instances, its dynamic "
                        "batcher's queue delay, preferred and max batch sizes), each tried for "
                        f"{triton_sweep.TRIAL_S:g} s after {triton_sweep.TRIAL_WARMUP_S:g} s at that point; "
                        "--no-triton-sweep: one instance per core, 1 ms delay (default: on)")
    p.add_argument("--rt-isolation", action="store_true",
                   help="also measure real-time p99 alone and beside closed-loop best-effort load "
                        f"({PROBE_CONCURRENCY} connections), real-time requests at --rt-rate")
    p.add_argument("--rt-rate", type=float, default=20.0, help="real-time req/s of --rt-isolation (default 20)")
    p.add_argument("--rt-rounds", type=int, default=3,
                   help="--rt-isolation's alternating idle/loaded pairs, their real-time latencies pooled "
                        "for the p99s (default 3)")
    p.add_argument("--load-during", metavar="MODEL",
                   help="also measure p99 at half the closed-loop capacity, alone and while MODEL (a model "
                        "of the repository not in --mix) is loaded and unloaded over and over; Atoll runs "
                        "in explicit model-control mode")
    p.add_argument("--no-ideal", action="store_true", help="skip the ideal_rps measurement")
    p.add_argument("--python-identity", action="store_true",
                   help="instead of --repository and --mix: a Python-backend identity model and the same identity "
                        "as ONNX (FP32 [3, 224, 224], python_identity.py), each driven alone with ready tensors, "
                        "no ideal; --baseline triton serves the same model.py under Triton's python backend")
    add_loadgen_options(p)
    p.add_argument("--executor", choices=EXECUTOR_CHOICES, help="passed to `atoll serve`")
    p.add_argument("--backend", choices=BACKEND_CHOICES, help="passed to `atoll serve`")
    p.add_argument("--batcher", choices=tuple(BATCHERS), help="passed to `atoll serve`")
    p.add_argument("--policy", choices=tuple(POLICIES), help="passed to `atoll serve`")
    add_config_options(p)
    p.add_argument("--timeout", type=float, default=60.0, help="client timeout per request, s (default 60)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", help="name in the results file (default: the vGPU kind, e.g. cpu, h100)")
    p.add_argument("--out", type=Path, help="results JSON (default bench/results/serve_<device>.json)")
    p.add_argument("--plot", type=Path, help="PNG of throughput vs p99, one curve per configuration")
    p.add_argument("--json", action="store_true", help="print the results JSON on stdout")
    p.set_defaults(func=run)


def _numbers(text: str, kind, flag: str) -> list:
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"atoll bench serve: {flag} takes comma-separated numbers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise SystemExit(f"atoll bench serve: {flag} needs positive numbers, got {text!r}")
    return values


def _serve_args(args, repository: str, mix: dict[str, float]) -> list[str]:
    """`atoll serve` options from the bench's pass-through flags; with --load-during, explicit
    model control serving the --mix models from the start."""
    out = ["--repository", repository]
    for flag in ("executor", "backend", "batcher", "policy", "config"):
        if getattr(args, flag):
            out += [f"--{flag}", getattr(args, flag)]
    for item in args.set:
        out += ["--set", item]
    if args.load_during:
        out += ["--model-control-mode", "explicit", *(arg for model in mix for arg in ("--load-model", model))]
    return out


class Bench:
    """Drives one system with the load points of one traffic, and rows them."""

    def __init__(self, args, load_cpus: tuple[int, ...], procs: int, ideal_rps: float | None, models: dict):
        self.args = args
        self.load_cpus = load_cpus
        self.procs = procs
        self.ideal_rps = ideal_rps
        self.models = models
        self.points: list[dict] = []  # every point's row so far, of every system

    def point(self, system, traffic, labels: dict, **load) -> dict:
        """One load point's row (`measure`'s arguments); Triton's, unless --no-triton-sweep, after
        a short sweep at this very point for its best settings (`triton_sweep`), kept in the row."""
        sweep = None
        if system.name == "triton" and self.args.triton_sweep:
            def trial() -> dict:
                return self.measure(system, traffic, labels, **{**load, "seconds": triton_sweep.TRIAL_S},
                                    warmup=triton_sweep.TRIAL_WARMUP_S)[0]  # fmt: skip

            sweep = triton_sweep.tune(system, triton_sweep.served(self.models, traffic.classes),
                                      self._triton_bound(labels, load), trial, f"{_variant(labels)} {_load(load)}")
        row = self.measure(system, traffic, labels, **load)[0]
        if sweep:
            row["triton_sweep"] = sweep
        self.points.append(row)
        return row

    def _triton_bound(self, labels: dict, load: dict) -> tuple[float | None, str]:
        """The p99 Triton's settings must meet at a point: Atoll's at the same point, else the SLO
        in open loop, else none (ms, whose)."""
        atoll = [r["latency_ms"]["p99"] for r in self.points
                 if r["server"] == "atoll" and "model_load" not in r and all(r[k] == v for k, v in labels.items())
                 and r["concurrency"] == (load.get("concurrency") or None) and r["rate_rps"] == load.get("rate")]
        if atoll and atoll[-1] is not None:
            return atoll[-1], "atoll"
        return (self.args.slo_ms, "slo") if load.get("rate") else (None, "none")

    def measure(self, system, traffic, labels: dict, rate: float | None = None, concurrency: int = 0,
                seconds: float | None = None, rt_rate: float | None = None, during=None,
                warmup: float | None = None) -> tuple:
        """One load point: open loop at `rate` or closed loop at `concurrency`. With `rt_rate`, the
        real-time requests go as a Poisson stream of their own at that rate, beside best-effort
        requests in closed loop at `concurrency` (or alone). `during(stop)` runs on a thread of its
        own through the measurement window, until the `stop` event is set. (row, every request's
        record, the measurement window). `seconds` and `warmup` default to --duration and --warmup."""


        a = self.args
        duration = seconds or a.duration
        warmup = a.warmup if warmup is None else warmup

        def plan(weights, rate, concurrency) -> LoadPlan:
            return LoadPlan(system.url, traffic.requests, weights, warmup + duration, rate, concurrency,
                            a.timeout, a.seed, self.load_cpus, labels["protocol"], system.grpc,
                            labels["shm"])  # fmt: skip

        if rt_rate:
            plans = split(plan(weights_of(traffic, "rt"), rt_rate, 0), 1)
            if concurrency:
                plans += split(plan(weights_of(traffic, "be"), None, concurrency), self.procs)
            mode, rate = ("rt-loaded" if concurrency else "rt-idle"), rt_rate
        else:
            plans = split(plan(traffic.weights, rate, concurrency), self.procs)
            mode = "open" if rate else "closed"
        what = " + ".join(([f"{rate:.1f} req/s"] if rate else []) + ([f"{concurrency} conn"] if concurrency else []))
        builds = counter_total(system.url, "atoll_program_builds")
        with LoadProcesses(plans) as load:
            meter = (system.meter(load.pids) if isinstance(system, cluster_bench.ClusterSystem)
                     else CpuMeter({"server": [system.pid] if system.pid else [], "load": load.pids}))
            threads = ThreadMeter(system.pid or 0)

            def begin() -> None:
                meter.start()
                threads.start()

            start = load.go()
            window = (start + warmup, start + warmup + duration)
            stop = threading.Event()
            beside = threading.Thread(target=during, args=(stop,), daemon=True) if during else None
            with tqdm(total=round(warmup + duration), desc=f"{system.name} {_variant(labels)} {what}",
                      unit="s", file=sys.stderr, disable=None, leave=False) as bar:  # fmt: skip
                for mark, action in ((window[0], begin), (window[1], None)):
                    while (left := mark - time.monotonic()) > 0:
                        time.sleep(min(0.5, left))
                        bar.n = round(min(time.monotonic() - start, warmup + duration))
                        bar.refresh()
                    if action:
                        action()
                        if beside:
                            beside.start()
                cpu = meter.stop()
                threads.stop()
            stop.set()
            if beside:
                beside.join()
            records = load.records()
        row = {"server": system.name, **labels, "mode": mode,
               "concurrency": concurrency or None,
               **summarise(records, traffic.classes, window, rate)}  # fmt: skip
        row["cpu_cores"] = cpu
        account = threads.account(round(row["throughput_rps"] * duration))
        row["cpu_account"] = account.to_json() if account else None
        # answers per CPU-second of the server's own processes: comparable across runs when other
        # tenants take a varying share of the machine
        row["throughput_per_server_core"] = round(row["throughput_rps"] / cpu["server"], 1) if cpu["server"] else None
        row["loadgen"]["processes"] = len(plans)
        row["loadgen"]["saturated"] = loadgen_saturated(row, len(plans))
        after = counter_total(system.url, "atoll_program_builds")
        row["program_builds"] = None if builds is None or after is None else after - builds
        row["ideal_rps"] = self.ideal_rps
        row["ideal_ratio"] = round(row["throughput_rps"] / self.ideal_rps, 3) if self.ideal_rps else None
        lat = row["latency_ms"]
        tqdm.write(f"{system.name:>6} {_variant(labels):>15} {what:>12}: {row['throughput_rps']:8.1f} req/s  "
                   f"p50 {lat['p50']} p99 {lat['p99']} ms  errors {sum(row['errors'].values())}  "
                   f"cores server {cpu['server']} load {cpu['load']} other {cpu['other']}"
                   + ("  LOAD GENERATOR SATURATED" if row["loadgen"]["saturated"] else ""),
                   file=sys.stderr)  # fmt: skip
        if account and system.name == "atoll":
            tqdm.write(account.table(), file=sys.stderr)
        return row, records, window

    def rt_isolation(self, system, traffic, labels: dict) -> tuple[list[dict], dict]:
        """Real-time p99 alone on the server, then beside saturating best-effort load (the
        issue's "RT p99 under load <= 1.5 x idle"), in `--rt-rounds` alternating pairs. A p99 from
        one short point rests on its few largest samples, so the headline p99s pool every round's
        real-time latencies, and each round's own figures show the spread."""


        a = self.args
        rt = [i for i, name in enumerate(traffic.classes) if name.endswith("/rt")]
        rows, pooled, rounds = [], {"rt-idle": [], "rt-loaded": []}, []
        for k in range(a.rt_rounds):
            pair = {}
            for concurrency in (0, PROBE_CONCURRENCY):
                row, records, window = self.measure(system, traffic, labels, concurrency=concurrency,
                                                    rt_rate=a.rt_rate)  # fmt: skip
                row["round"] = k
                rows.append(row)
                pooled[row["mode"]].append(class_latencies(records, rt, window))
                pair[row["mode"]] = row
            p99 = [max((pair[m]["per_class"][traffic.classes[i]]["latency_ms"]["p99"] or 0.0) for i in rt)
                   for m in ("rt-idle", "rt-loaded")]  # fmt: skip
            rounds.append({"idle_ms": p99[0], "loaded_ms": p99[1],
                           "ratio": round(p99[1] / p99[0], 3) if p99[0] else None,
                           "be_rps": sum(c["throughput_rps"] for n, c in pair["rt-loaded"]["per_class"].items()
                                         if n.endswith("/be"))})  # fmt: skip
        latency = {mode: percentiles(np.concatenate(parts), qs=(50, 99), digits=2) for mode, parts in pooled.items()}
        idle, loaded = latency["rt-idle"]["p99"], latency["rt-loaded"]["p99"]
        ratios = [r["ratio"] for r in rounds if r["ratio"] is not None]
        summary = {"rt_p99_idle_ms": idle, "rt_p99_loaded_ms": loaded,
                   "rt_p99_ratio": round(loaded / idle, 3) if idle and loaded else None,
                   "rt_samples": {"idle": latency["rt-idle"]["n"], "loaded": latency["rt-loaded"]["n"]},
                   "rt_rounds": rounds, "rt_ratio_range": [min(ratios), max(ratios)] if ratios else None,
                   "be_rps_beside_rt": round(float(np.mean([r["be_rps"] for r in rounds])), 2)}  # fmt: skip
        return rows, summary

    def model_load(self, system, traffic, labels: dict) -> tuple[list[dict], dict]:
        """p99 at half the closed-loop capacity, alone and while `--load-during` is loaded and
        unloaded over and over (the issue's "p99 during a load <= 1.5 x without")."""
        a = self.args
        probe = self.point(system, traffic, labels, concurrency=PROBE_CONCURRENCY, seconds=a.duration / 2)
        rate = round(0.5 * probe["throughput_rps"], 1)
        alone = self.point(system, traffic, labels, rate=rate)
        swaps: list[dict] = []
        during = self.point(system, traffic, {**labels, "model_load": a.load_during}, rate=rate,
                            during=lambda stop: _load_and_unload(system.url, a.load_during, stop, swaps))  # fmt: skip
        p99 = (alone["latency_ms"]["p99"], during["latency_ms"]["p99"])
        return [probe, alone, during], {
            "model_load": a.load_during, "load_rate_rps": rate, "p99_alone_ms": p99[0], "p99_during_load_ms": p99[1],
            "p99_load_ratio": round(p99[1] / p99[0], 3) if p99[0] else None, "swaps": swaps,
        }  # fmt: skip

    def drive(self, system, traffic, labels: dict) -> tuple[list[dict], dict]:
        """Every load point the arguments ask for; (rows, summary of this configuration)."""

        a = self.args
        if a.rate:
            rows = [self.point(system, traffic, labels, rate=r) for r in _numbers(a.rate, float, "--rate")]
            return rows, {}
        if a.concurrency:
            conns = _numbers(a.concurrency, int, "--concurrency")
            return [self.point(system, traffic, labels, concurrency=c) for c in conns], {}
        probe = self.point(system, traffic, labels, concurrency=PROBE_CONCURRENCY, seconds=a.duration / 2)
        start = max(1.0, 0.6 * probe["throughput_rps"])
        rows, best = sweep(lambda r: self.point(system, traffic, labels, rate=round(r, 1)), start, a.slo_ms)
        at = next((r for r in rows if r["rate_rps"] == (round(best, 1) if best else None)), None)
        return [probe, *rows], {
            "max_rate_at_slo_rps": round(best, 1) if best else None,
            "throughput_rps": at["throughput_rps"] if at else None,
            "latency_ms": at["latency_ms"] if at else None,
            "ideal_ratio": at["ideal_ratio"] if at else None,
            "throughput_per_server_core": at["throughput_per_server_core"] if at else None,
            "closed_loop_rps": probe["throughput_rps"],
            "closed_loop_per_server_core": probe["throughput_per_server_core"],
        }  # fmt: skip


def _systems(args, serve_args: list[str], repository: str, mixes: list[dict], server_cpus: tuple[int, ...]):
    """(name, context manager factory) of every system to drive, Atoll (one server, or clusters) first."""
    driven = set().union(*mixes)  # Triton starts these models' stubs only
    if args.python_identity:
        driven &= python_identity.TRITON_MODELS
    if args.cluster:
        loads = [arg for model in mixes[0] for arg in ("--load-model", model)] if not args.load_during else []
        out = [(f"{cluster_bench.ENDPOINT}{n}", lambda n=n: cluster_bench.cluster(
            n, [*serve_args, *loads], args.pin_nodes, server_cpus)) for n in cluster_bench.counts(args.cluster)]
    else:
        out = [("atoll", (lambda: servers.remote(args.url, args.grpc_address or "")) if args.url
                else (lambda: servers.atoll(serve_args, server_cpus)))]  # fmt: skip
    for name in dict.fromkeys(args.baseline):
        if name == "plain":
            out.append(("plain", lambda: servers.plain(repository, server_cpus)))
        else:
            out.append(("triton", lambda: triton_baseline.server(
                repository, server_cpus, triton_sweep.SERVER_OPTIONS if args.triton_sweep else (), driven)))
    return out


def run(args) -> int:
    if not args.python_identity:
        return _run(args, None)
    if args.repository or args.mix or args.url or args.cluster:
        print("atoll bench serve: --python-identity brings its own repository and mixes; drop --repository, "
              "--mix, --url and --cluster", file=sys.stderr)  # fmt: skip
        return 2
    with tempfile.TemporaryDirectory(prefix="atoll-identity-") as tmp:
        args.repository, args.input, args.no_ideal = str(python_identity.write(Path(tmp))), "tensor", True
        return _run(args, [dict(m) for m in python_identity.MIXES])


def _run(args, mixes: list[dict] | None) -> int:
    """The bench over the mix of --mix, or each of `mixes` in turn (--python-identity)."""
    if not 0.0 <= args.rt_share <= 1.0:
        print(f"atoll bench serve: --rt-share must be between 0 and 1, got {args.rt_share}", file=sys.stderr)
        return 2
    if args.rt_rate <= 0 or args.rt_rounds < 1:
        print(f"atoll bench serve: --rt-rate must be positive and --rt-rounds at least 1, got {args.rt_rate:g} and "
              f"{args.rt_rounds}", file=sys.stderr)  # fmt: skip
        return 2
    if args.cluster and args.url:
        print("atoll bench serve: --cluster starts its own endpoint and nodes; drop --url", file=sys.stderr)
        return 2
    try:
        config = config_from_args(args, SERVE_FLAGS)
        repository = config.server.repository or args.repository
        if not repository:
            repository = str(demo_repository())
        models = load_repository(repository)
        mixes = mixes or [traffic_mod.parse_mix(args.mix, models)]
        mix = mixes[0]
    except (ConfigError, RepositoryError, ValueError) as exc:
        print(f"atoll bench serve: {exc}", file=sys.stderr)
        return 2
    server_cpus, load_cpus, procs = split_cores(args, "serve")
    media = traffic_mod.Media(args.images, args.seed)
    ideal = None if args.no_ideal else measure_ideal(config, models, mix, media.median_clip_s)
    inputs = traffic_mod.INPUTS if args.input == "both" else (args.input,)
    protocols = [p.strip() for p in args.protocol.split(",") if p.strip()]
    if not protocols or set(protocols) - set(TRANSPORTS):
        print(f"atoll bench serve: --protocol takes {', '.join(TRANSPORTS)} (comma-separated); got {args.protocol!r}",
              file=sys.stderr)
        return 2
    variants = [(protocol, shm) for protocol in protocols for shm in {"off": (False,), "on": (True,),
                                                                      "both": (False, True)}[args.shm]]  # fmt: skip
    traffics = {(_mix_label(m), kind): (m, traffic_mod.build(models, m, args.rt_share, media, kind))
                for m in mixes for kind in inputs}  # fmt: skip
    if args.load_during and (args.load_during not in models or args.load_during in mix):
        print(f"atoll bench serve: --load-during needs a model of the repository outside --mix; got "
              f"{args.load_during!r}", file=sys.stderr)  # fmt: skip
        return 2
    serve_args = _serve_args(args, repository, mix)
    bench = Bench(args, load_cpus, procs, ideal["ideal_rps"] if ideal else None, models)
    rows, summary, skipped = [], [], {}
    for name, start in _systems(args, serve_args, repository, mixes, server_cpus):
        try:
            with start() as system:
                for ((mix_label, kind), (m, traffic)), (protocol, shm) in itertools.product(traffics.items(),
                                                                                             variants):
                    labels = {"input": kind, "protocol": protocol, "shm": shm, "mix": mix_label,
                              "images": args.images, "rt_share": args.rt_share}  # fmt: skip
                    why = _unsupported(system, protocol, shm)
                    if args.python_identity and name == "triton" and set(m) - python_identity.TRITON_MODELS:
                        why = "Triton's yardstick here is its python backend (the ONNX model is Atoll's alone)"
                    if why:
                        skipped[f"{name} {_variant(labels)}" + (f" {mix_label}" if len(mixes) > 1 else "")] = why
                        continue
                    drive = cluster_bench.drive if isinstance(system, cluster_bench.ClusterSystem) else Bench.drive
                    mine, best = drive(bench, system, traffic, labels)
                    if args.load_during and name == "atoll":
                        more, loading = bench.model_load(system, traffic, labels)
                        mine, best = mine + more, {**best, **loading}
                    if args.rt_isolation:  # both classes present; the point sends each on its own
                        both = traffic_mod.build(models, m, 0.5, media, kind)
                        more, isolation = bench.rt_isolation(system, both, {**labels, "rt_share": None})
                        mine, best = mine + more, {**best, **isolation}
                    rows += mine
                    if best:
                        summary.append({"server": name, **labels, **best})
        except RuntimeError as exc:  # a baseline that cannot run here is reported, not fatal
            if name not in SYSTEMS:  # Atoll itself, one server or a cluster
                print(f"atoll bench serve: {exc}", file=sys.stderr)
                return 1
            skipped[name] = str(exc)
            print(f"atoll bench serve: {name} skipped: {exc}", file=sys.stderr)
    device = args.device or served_vgpus(config)[0].profile_kind
    doc = {
        "bench": "serve", "device": device, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"cores": len(os.sched_getaffinity(0)), "machine": platform.machine(),
                 "load_avg_1min_at_start": round(os.getloadavg()[0], 2)},
        "config": {"repository": repository, "mix": mix if len(mixes) == 1 else mixes, "rt_share": args.rt_share,
                   "images": args.images,
                   "inputs": list(inputs), "protocols": protocols, "shm": args.shm, "duration_s": args.duration, "warmup_s": args.warmup,
                   "slo_ms": args.slo_ms, "atoll_serve_args": serve_args, "url": args.url,
                   "server_cores": list(server_cpus) or "all", "loadgen_cores": list(load_cpus) or "all",
                   "loadgen_processes": procs, "baselines": list(dict.fromkeys(args.baseline)),
                   "cluster": args.cluster, "pin_nodes": args.pin_nodes},
        "ideal": ideal, "summary": summary, "skipped": skipped, "results": rows,
    }  # fmt: skip
    if args.cluster:
        doc["cluster_scaling"] = cluster_bench.scaling(rows)
    out = args.out or Path("bench/results") / f"serve_{device}.json"
    if args.plot:
        plot(rows, args.slo_ms, f"atoll bench serve on {device} ({doc['host']['cores']} cores)", args.plot)
    emit(doc, out, args.json, [_summary_line(s, args.slo_ms) for s in summary]
         + [cluster_bench.scaling_line(s) for s in doc.get("cluster_scaling", [])])
    return 0


def _summary_line(s: dict, slo_ms: float) -> str:
    parts = []
    if "max_rate_at_slo_rps" in s:
        p99 = s["latency_ms"]["p99"] if s["latency_ms"] else None
        parts.append(f"{s['max_rate_at_slo_rps']} req/s at p99 <= {slo_ms:g} ms (p99 {p99} ms, ideal_ratio "
                     f"{s['ideal_ratio']}); closed loop {s['closed_loop_rps']} req/s")  # fmt: skip
    if "p99_load_ratio" in s:
        parts.append(f"p99 at {s['load_rate_rps']} req/s {s['p99_alone_ms']} ms alone, {s['p99_during_load_ms']} ms "
                     f"while {s['model_load']} loads and unloads (x{s['p99_load_ratio']}, {len(s['swaps'])} swaps)")
    if "rt_p99_ratio" in s:
        rounds = "/".join(str(r["ratio"]) for r in s["rt_rounds"])
        parts.append(f"real-time p99 {s['rt_p99_idle_ms']} ms idle, {s['rt_p99_loaded_ms']} ms beside "
                     f"best-effort load (x{s['rt_p99_ratio']}, {len(s['rt_rounds'])} rounds pooled; "
                     f"each x{rounds})")  # fmt: skip
    return f"{s['server']:>6} {_variant(s):>15}: " + "; ".join(parts)


def _load_and_unload(url: str, model: str, stop: threading.Event, swaps: list[dict]) -> None:
    """Load `model`, unload it, again, until `stop`; each cycle's seconds in `swaps`."""
    while not stop.is_set():
        swap = {}
        for action in ("load", "unload"):
            start = time.monotonic()
            request = urllib.request.Request(f"{url}/v2/repository/models/{model}/{action}", b"", method="POST")
            with urllib.request.urlopen(request, timeout=300):
                pass
            swap[f"{action}_s"] = round(time.monotonic() - start, 3)
        swaps.append(swap)


def _mix_label(mix: dict) -> str:
    """e.g. "mobilenet_v3_small=0.8+citrinet=0.2": a row's "mix"."""
    return "+".join(f"{m}={s:g}" for m, s in mix.items())


def _load(load: dict) -> str:
    """e.g. "120.0 req/s" or "8 conn": a point's load as its line says it."""
    return f"{load['rate']:.1f} req/s" if load.get("rate") else f"{load['concurrency']} conn"


def _variant(labels: dict) -> str:
    """e.g. "tensor grpc+shm": the input kind and how it travels."""
    return f"{labels['input']} {labels['protocol']}" + ("+shm" if labels["shm"] else "")


def _unsupported(system, protocol: str, shm: bool) -> str:
    """Why `system` cannot take this variant ("" if it can)."""
    if protocol.startswith("grpc") and not system.grpc:
        return "no gRPC endpoint (give --grpc-address with --url)" if system.name == "atoll" else "no gRPC endpoint"
    if shm and system.name == "plain":
        return "no shared-memory extension"
    if shm and system.name.startswith(cluster_bench.ENDPOINT):
        return "the cluster endpoint refuses shared memory (a region lives on one machine)"
    return ""
