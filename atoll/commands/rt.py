"""`atoll rt`: real-time guarantees (DART on REEF, atoll/supervisor/rt_admission.py).

  atoll rt profile MODEL [MODEL ...]   measure WCETs through the real worker path of one vGPU and
                                       write them to batching/profiles/rt_<kind>.json (or --out)
  atoll rt status                      each declared model's bound, deadline, worst observed and
                                       demotions, from a running server's metrics (--url), or the
                                       bounds a repository's declared models would get (--repository)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path

from gpu_runtime.executors import resolve_executor
from gpu_runtime.vgpu.discovery import discover
from gpu_runtime.vgpu.pool import WorkerPool
from scheduler.rt_profile import WcetProfile

from atoll.bench.rt_hops import round_trips
from atoll.bench.rt_wcet import StallProbe
from atoll.bench.rt_worker import on_worker
from atoll.commands.profile import parse_batches
from atoll.repository.demo import demo_repository
from atoll.repository.specs import load_repository
from atoll.supervisor.rt_admission import (
    RtRefused,
    bounds_for,
    declaration,
    load_wcet_profile,
    profile_path,
)

METRICS = ("atoll_rt_bound_seconds", "atoll_rt_deadline_seconds", "atoll_rt_observed_worst_seconds",
           "atoll_rt_demoted_total")  # fmt: skip


def register(subparsers) -> None:
    parser = subparsers.add_parser("rt", help="real-time guarantees: WCET profiles and worst-case bounds")
    sub = parser.add_subparsers(dest="rt", metavar="ACTION")
    sub.required = True
    p = sub.add_parser("profile", help="measure models' WCETs on a vGPU for the real-time admission test")
    p.add_argument("models", nargs="+", help="model names in the repository")
    p.add_argument("--repository", help="Triton-layout model repository (default: built-in demo)")
    p.add_argument("--vgpu", help="vGPU id from `atoll info` (default: the first one found)")
    p.add_argument("--vgpu-mode", default="auto", help="vGPU discovery mode (auto|mig|gpu|cpu)")
    p.add_argument("--executor", default="auto", help="model executor, as `atoll serve` takes it")
    p.add_argument("--batches", default="1,2,4", help="comma list of batch sizes")
    p.add_argument("--runs", type=int, default=200, help="timed real-time batches per batch size")
    p.add_argument("--probes", type=int, default=200,
                   help="real-time batches sent while best-effort batches keep the vGPU busy (the blocking)")
    p.add_argument("--margin", type=float, default=1.25, help="WCET = measured maximum x margin")
    p.add_argument("--hop-requests", type=int, default=200,
                   help="real-time requests through a served near-empty model over HTTP, for the front end's "
                        "hops around the dispatcher (0: not measured, the bound starts at the dispatcher)")
    p.add_argument("--out", type=Path, help="profile JSON (default batching/profiles/rt_<kind>.json); "
                                            "models already in it are kept unless measured again")
    p.set_defaults(func=run_profile)
    s = sub.add_parser("status", help="declared real-time models: bound, deadline, worst observed")
    s.add_argument("--url", default="http://127.0.0.1:8002/metrics", help="a running server's metrics")
    s.add_argument("--repository", help="instead: the bounds this repository's declared models would get")
    s.add_argument("--kind", default="cpu", help="with --repository: the vGPU kind whose WCET profile to use")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=run_status)


def run_profile(args: argparse.Namespace) -> int:
    try:
        batches = parse_batches(args.batches)
        repository = args.repository or demo_repository()
        specs = load_repository(repository)
        unknown = [m for m in args.models if m not in specs]
        if unknown:
            raise ValueError(f"no model {', '.join(unknown)} in {repository}")
        vgpus = discover(args.vgpu_mode).vgpus
        info = next((v for v in vgpus if v.id == args.vgpu), None) if args.vgpu else vgpus[0]
        if info is None:
            raise ValueError(f"no vGPU {args.vgpu!r}; found {', '.join(v.id for v in vgpus)}")
        out = args.out or profile_path(info.profile_kind)
        models, blocking = {}, 0.0
        probe = StallProbe()  # runs while the real-time batches are timed
        with WorkerPool([info], executor=resolve_executor(args.executor, [info])) as pool:
            for name in args.models:
                print(f"rt profile: {name} on {info.id}", file=sys.stderr)
                models[name], seen = on_worker(pool, info.id, specs[name], batches, args.runs, args.margin,
                                               args.probes, probe)  # fmt: skip
                blocking = max(blocking, seen)
        if args.hop_requests > 0:
            print(f"rt profile: the front end's hops ({args.hop_requests} requests)", file=sys.stderr)
        hops = round_trips(args.vgpu_mode, args.hop_requests) if args.hop_requests > 0 else []
        source = (f"measured by `atoll rt profile` {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on "
                  f"{info.name} vGPU {info.id}, executor {pool.executor}: largest of {args.runs} real-time "
                  f"batches alone x {args.margin}; blocking: largest of {args.probes} beside a best-effort "
                  "closed loop of the same model, over its median alone, x the margin; "
                  "stall: the largest lateness of a stall probe above the real-time lanes while they ran, x the "
                  "margin; front end: largest "
                  f"round trip of {args.hop_requests} real-time requests of a near-empty model over HTTP on this "
                  "machine, x the margin")  # fmt: skip
        profile = WcetProfile(info.profile_kind, args.margin, blocking, models, source, probe.max_late_s * args.margin,
                              max(hops, default=0.0) * args.margin)  # fmt: skip
        if out.is_file():
            profile = load_wcet_profile(out).merged(profile)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(profile.to_json(), indent=2) + "\n")
    except (ValueError, RuntimeError, OSError) as e:
        print(f"atoll rt profile: {e}", file=sys.stderr)
        return 2
    for name in args.models:
        m = profile.models[name]
        print(f"{name}: WCET {', '.join(f'b{b} {w * 1e3:.2f} ms' for b, w in sorted(m.execution_s.items()))}; "
              f"preprocess {m.preprocess_s * 1e3:.2f} ms")
    print(f"blocking {profile.blocking_s * 1e3:.2f} ms; platform stall {profile.stall_s * 1e3:.2f} ms; front end "
          f"{profile.front_end_s * 1e3:.2f} ms; wrote {out}")
    return 0


def run_status(args: argparse.Namespace) -> int:
    try:
        rows = repository_bounds(args.repository, args.kind) if args.repository else server_status(args.url)
    except (RtRefused, ValueError, OSError) as e:
        print(f"atoll rt status: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no declared real-time models")
    for r in rows if not args.json else ():
        print("  ".join(f"{k} {v}" for k, v in r.items()))
    return 0


def server_status(url: str) -> list[dict]:
    """Per model, the atoll_rt_* series of a running server's metrics."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    rows: dict[str, dict] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0]
        if name not in METRICS:
            continue
        labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1 : line.index("}")].split(","))
        model = labels['model'].strip('"')
        value = float(line.rsplit(" ", 1)[1])
        row = rows.setdefault(model, {"model": model})
        if name == "atoll_rt_demoted_total":
            row[f"demoted_{labels['reason'].strip(chr(34))}"] = int(value)
        else:
            row[name.removeprefix("atoll_rt_").removesuffix("_seconds") + "_ms"] = round(value * 1e3, 3)
    return [rows[m] for m in sorted(rows)]


def repository_bounds(repository: str, kind: str) -> list[dict]:
    """The bounds of every model of `repository` that declares an envelope, all served together."""
    specs = load_repository(repository)
    declared = {n: (s, d) for n, s in specs.items() if (d := declaration(s)) is not None}
    if not declared:
        return []
    path = profile_path(kind)
    bounds = bounds_for(declared, {kind: load_wcet_profile(path) if path.is_file() else None})
    return [{"model": n, "deadline_ms": round(b.deadline_s * 1e3, 3), "bound_ms": round(b.total_s * 1e3, 3),
             "meets": b.meets} for n, b in sorted(bounds.items())]  # fmt: skip
