"""The servers `atoll bench serve` drives: Atoll (`atoll serve`, or one already running at a URL),
the plain Python baseline, and Triton. Each is a context manager yielding a `System`: its URL (and
gRPC address, where it serves gRPC) and the root process whose tree the bench meters for CPU time."""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from atoll.supervisor.server_process import ServerProcess


@dataclass
class System:
    name: str  # "atoll" | "plain" | "triton"
    url: str
    pid: int | None  # None: not ours (a server at --url), its CPU time is not metered
    about: dict = field(default_factory=dict)
    grpc: str = ""  # host:port of its gRPC service ("" for none)


def add_loadgen_options(p) -> None:
    """Where the load processes run, as `split_cores` reads it (bench serve and bench robust)."""
    p.add_argument("--loadgen-procs", type=int, help="load processes (default: 1 per 8 cores, at least 1)")
    p.add_argument("--loadgen-cores", type=int,
                   help="cores reserved for the load processes; the servers get the others "
                        "(default 0 below 8 cores, where they share every core, else 1 per 8)")


def split_cores(args, command: str) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """(server cores, load cores, load processes) from `add_loadgen_options`' arguments: empty
    tuples where everything shares."""
    cores = sorted(os.sched_getaffinity(0))
    reserved = args.loadgen_cores if args.loadgen_cores is not None else (0 if len(cores) < 8 else len(cores) // 8)
    if not 0 <= reserved < len(cores):
        raise SystemExit(f"atoll bench {command}: --loadgen-cores must be in 0..{len(cores) - 1}")
    procs = args.loadgen_procs or max(1, reserved or len(cores) // 8)
    if not reserved:
        return (), (), procs
    return tuple(cores[:-reserved]), tuple(cores[-reserved:]), procs


@contextmanager
def pinned(cpus: tuple[int, ...]):
    """Processes started inside inherit these cores (the calling thread's affinity)."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


class _Baseline(ServerProcess):
    """The plain server as a child process, started and stopped like `atoll serve`."""

    def __init__(self, repository: str, workers: int):
        super().__init__()
        self.args = [sys.executable, "-m", "atoll.bench.baseline_server", "--repository", repository,
                     "--port", "0", "--workers", str(workers)]  # fmt: skip


@contextmanager
def started(serve_args: list[str], cpus: tuple[int, ...]):
    """`atoll serve` on `cpus` (its children inherit them; empty: any core), stopped at exit."""
    with pinned(cpus):
        server = ServerProcess(serve_args)
        server.__enter__()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def atoll(serve_args: list[str], cpus: tuple[int, ...]):
    with started(serve_args, cpus) as server:
        yield System("atoll", server.url, server.proc.pid, {"args": serve_args}, server.grpc_address)


@contextmanager
def remote(url: str, grpc: str = ""):
    yield System("atoll", url.rstrip("/"), None, {"url": url}, grpc)


@contextmanager
def plain(repository: str, cpus: tuple[int, ...]):
    workers = len(cpus) if cpus else len(os.sched_getaffinity(0))
    with pinned(cpus):
        server = _Baseline(repository, workers)
        server.__enter__()
    try:
        yield System("plain", server.url, server.proc.pid,
                     {"workers": workers, "server": "atoll.bench.baseline_server"})
    finally:
        server.stop()


def counter_total(url: str, family: str, **labels: str) -> float | None:
    """The counter `family` (prometheus_client's name, without `_total`) from the server's
    /metrics, summed over its samples carrying `labels`; None where the server has no such metric
    (a baseline, or an Atoll before it counted it)."""

    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
            text = r.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    values = [s.value for f in text_string_to_metric_families(text) if f.name == family for s in f.samples
              if s.name == f"{family}_total" and labels.items() <= s.labels.items()]  # fmt: skip
    return sum(values) if values else None
