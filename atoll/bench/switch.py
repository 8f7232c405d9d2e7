"""`atoll bench switch`: more models than a vGPU's memory budget, switched in on demand (PipeSwitch,
docs/residency.md), against the same models all resident and against a Triton user's explicit
unload/load through the model-control API.

N generated models (`switch_models`) whose sizes in the pool (weights; with the CUDA emulator's
virtual pool, weights and arenas) total `--ratio` times the budget are served by
`atoll serve` on one CPU vGPU; requests arrive as a Poisson process, each for a model drawn with Zipf
popularity (the same sequence in every run). Runs:

- `resident`: a budget that holds every model (residency on, nothing to switch);
- `whole`: residency off, every model loaded whole as before (what `resident` must not be slower than);
- `switch`: the budget; models switch in layer group by layer group;
- `explicit`: residency off, and the client keeps loaded only what fits the same budget: before a
  request for a model not loaded it unloads least recently used idle models and loads it
  (`POST /v2/repository/models/<m>/unload`, `.../load`), one control call at a time, as Triton users do.
- `engine-switch`: no server: the per-switch probes on REEF's engine in this process (the mechanism
  without the server's processes and hops).
- `fit-cost`: no server: REEF's engine in this process, with residency off and with a budget that
  holds every model, in interleaved rounds of sequential requests, timed and CPU-metered (what the
  residency code costs a batch when everything fits: the admission and one integer compare per launch).

Each run reports throughput, p50/p99 latency and switches (or loads) per second. Before the `switch`
and `explicit` loads, probes on the idle server switch each model in once: the request's latency
over the same request's once resident (total overhead), the start-up overhead (request to first
launch, from the worker's metrics), the request-to-last-group time, beside the pure transfer time
of the weights at the link's bandwidth. On CPU vGPUs the link is simulated (`--bandwidth-gb-s`); on
the CUDA emulator (`--executor cuda-emu --bandwidth-gb-s 0`) the copy is the real memcpy into its
device memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
import urllib.request
from collections import Counter, OrderedDict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from gpu_runtime.compiler.shapes import ModelShapes
from gpu_runtime.priority import Priority
from gpu_runtime.residency.manager import OPEN, GatedExecutor
from gpu_runtime.residency.settings import ResidencySettings
from gpu_runtime.residency.vmm import round_up
from gpu_runtime.residency.vmm_host import GRANULARITY
from gpu_runtime.vgpu.batches import batch_sizes
from gpu_runtime.vgpu.discovery import discover_vgpus
from scheduler.vgpu_engine import ReefEngine

from atoll.bench import servers
from atoll.bench.bodies import tensor_body
from atoll.bench.harness import emit
from atoll.bench.loadgen import Workload, run_load
from atoll.bench.switch_models import repository

MB = 1 << 20
MAX_BATCH = 4  # the generated models' max_batch_size
RUNS = ("resident", "whole", "switch", "explicit", "fit-cost", "engine-switch")
FIT_ROUNDS, FIT_REQUESTS = 10, 40  # fit-cost: interleaved rounds, sequential batch-1 requests per round
SHORT = {"models": 4, "layers": 4, "width": 256, "requests": 40, "rate": 20.0, "probes": 2}


def register(subparsers) -> None:
    p = subparsers.add_parser("switch", help="models beyond a vGPU's memory budget switched in on demand "
                                             "vs all resident vs explicit unload/load")
    p.add_argument("--models", type=int, default=8, help="models served (N)")
    p.add_argument("--layers", type=int, default=8, help="MatMul + Relu layers per model")
    p.add_argument("--width", type=int, default=768, help="layer width (weights: layers x width^2 x 4 bytes)")
    p.add_argument("--ratio", type=float, default=3.0, help="the models' size in the pool over the budget (2-4; "
                                                           "weights, and arenas on the emulator's virtual pool)")
    p.add_argument("--requests", type=int, default=400, help="requests per run")
    p.add_argument("--rate", type=float, default=25.0, help="Poisson arrivals per second")
    p.add_argument("--zipf", type=float, default=1.1, help="popularity of the k-th model ~ 1 / k^zipf")
    p.add_argument("--executor", choices=("numpy", "cuda-emu"), default="numpy")
    p.add_argument("--bandwidth-gb-s", type=float, default=12.0,
                   help="the simulated host-to-vGPU link (12: PCIe 3 x16; 0: the memcpy as it runs)")
    p.add_argument("--probes", type=int, default=None, help="switches probed on the idle server (default N)")
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, from {', '.join(RUNS)}")
    p.add_argument("--short", action="store_true", help=f"a test's run: {SHORT}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the results JSON on stdout")
    p.add_argument("--out", type=Path, default=None, help="results file (default bench/results/switch_cpu.json, "
                                                          "switch_cuda-emu.json for the emulator)")
    p.set_defaults(func=run)


def run(args) -> None:
    if args.short:
        for key, value in SHORT.items():
            setattr(args, key, value)
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    if not runs or set(runs) - set(RUNS):
        raise SystemExit(f"atoll bench switch: --runs takes {', '.join(RUNS)}; got {args.runs!r}")
    if not 2 <= args.ratio <= 4:
        raise SystemExit("atoll bench switch: --ratio must be within 2-4 (the models' weights over the budget)")
    names = [f"m{i}" for i in range(args.models)]
    with tempfile.TemporaryDirectory(prefix="atoll-switch-") as tmp:
        paths = repository(Path(tmp), names, args.layers, args.width, max_batch=MAX_BATCH)
        weights = {m: ModelShapes(p).program((1, None)).weight_bytes for m, p in paths.items()}
        sizes = {m: _pool_bytes(args.executor, ModelShapes(p)) for m, p in paths.items()}
        total = sum(weights.values())
        budget = sum(sizes.values()) / args.ratio
        if budget < max(sizes.values()):
            raise SystemExit("atoll bench switch: the budget would not hold the largest model; lower --ratio")
        rng = np.random.default_rng(args.seed)
        x = rng.standard_normal((1, args.width)).astype(np.float32)
        body = tensor_body("x", x)
        popularity = 1 / np.arange(1, args.models + 1) ** args.zipf
        workloads = [Workload(m, "x", [body], float(w)) for m, w in zip(names, popularity)]
        results = {}
        for name in runs:
            if name == "fit-cost":
                results[name] = _fit_cost(args, paths, sizes, x)
            elif name == "engine-switch":
                results[name] = {"per_switch": _engine_probe(args, paths, weights, budget, x)}
            else:
                results[name] = _run(name, args, tmp, names, sizes, budget, workloads, body, weights)
    doc = {
        "bench": "switch",
        "setup": {"models": args.models, "layers": args.layers, "width": args.width,
                  "weights_mb": round(total / MB, 2), "budget_mb": round(budget / MB, 2), "ratio": args.ratio,
                  "model_mb": round(max(weights.values()) / MB, 2),
                  "model_pool_mb": round(max(sizes.values()) / MB, 2), "requests": args.requests, "rate": args.rate,
                  "arrivals": "poisson", "zipf": args.zipf, "executor": args.executor,
                  "bandwidth_gb_s": args.bandwidth_gb_s or "memcpy", "vgpus": "1 CPU vGPU", "seed": args.seed},
        "runs": results,
    }
    device = "cpu" if args.executor == "numpy" else args.executor
    emit(doc, args.out or Path("bench/results") / f"switch_{device}.json", args.json, _summary(results))


def _pool_bytes(executor: str, shapes: ModelShapes) -> int:
    """What a model takes in the vGPU's pool: its weights (numpy); on the emulator's virtual pool its
    weights and one arena per priority (the largest batch's), each range whole chunks."""
    weights = shapes.program((1, None)).weight_bytes
    if executor == "numpy":
        return weights
    arena = max(shapes.program((b, None)).arena_bytes for b in batch_sizes(MAX_BATCH))
    return round_up(weights, GRANULARITY) + len(Priority) * round_up(arena, GRANULARITY)


def _serve_args(run: str, args, repo: str, names: list[str], sizes: dict, budget: float) -> list[str]:
    common = ["--repository", repo, "--backend", "cpu", "--set", f"vgpus.executor={args.executor}",
              "--set", "vgpus.cpu_vgpus=1", "--set", f"residency.bandwidth_gb_s={args.bandwidth_gb_s}"]
    if run == "resident":
        return [*common, "--set", f"residency.budget_mb={sum(sizes.values()) * 1.05 / MB}"]
    if run == "switch":
        return [*common, "--set", f"residency.budget_mb={budget / MB}"]
    if run == "explicit":
        first = _fitting(names, sizes, budget)
        return [*common, "--set", "server.model_control_mode=explicit", "--set", f"server.load_model={','.join(first)}"]
    return common


def _fitting(names: list[str], sizes: dict, budget: float) -> list[str]:
    out, used = [], 0
    for m in names:
        if used + sizes[m] <= budget:
            out.append(m)
            used += sizes[m]
    return out


def _run(name: str, args, repo: str, names: list[str], sizes: dict, budget: float, workloads, body,
         weights: dict) -> dict:
    with servers.atoll(_serve_args(name, args, repo, names, sizes, budget), ()) as system:
        url = system.url
        loads = ExplicitLoads(url, sizes, budget, _fitting(names, sizes, budget)) if name == "explicit" else None
        out: dict = {}
        if name in ("switch", "explicit"):
            out["per_switch"] = _probe(url, names[: args.probes or len(names)], body, weights, args, loads)
        before = _switches(url)
        summary = asyncio.run(run_load(url, workloads, args.requests, args.rate, seed=args.seed, progress=False,
                                       timeout_s=300.0, guard=loads.guard if loads else None))
        switched = (loads.loads if loads else _switches(url) - before)
    out.update(summary.to_dict())
    out["switches"] = switched
    out["switches_per_s"] = round(switched / summary.duration_s, 2) if summary.duration_s else 0.0
    return out


def _fit_cost(args, paths: dict[str, str], sizes: dict, x: np.ndarray) -> dict:
    """Median per-request latency (ms) of each round, residency off vs on with room for all."""
    vgpu = discover_vgpus("cpu", cpu_vgpus=1)[0]
    settings = {"whole": None, "resident": ResidencySettings(int(sum(sizes.values()) * 1.05), args.bandwidth_gb_s * 1e9)}
    engines = {}
    for name, residency in settings.items():
        engines[name] = ReefEngine(vgpu, residency=residency)
        for model, path in paths.items():
            engines[name].load(model, path, args.executor, max_batch=MAX_BATCH)
    wall: dict[str, list[float]] = {name: [] for name in engines}
    cpu: dict[str, list[float]] = {name: [] for name in engines}
    try:
        for r in range(FIT_ROUNDS):
            for name in (list(engines) if r % 2 == 0 else list(engines)[::-1]):
                times = []
                cpu_start = time.process_time()
                for i in range(FIT_REQUESTS):
                    start = time.perf_counter()
                    engines[name].run(f"m{i % len(paths)}", {"x": x}).result()
                    times.append(time.perf_counter() - start)
                cpu[name].append(round((time.process_time() - cpu_start) / FIT_REQUESTS * 1e3, 3))
                wall[name].append(round(statistics.median(times) * 1e3, 3))
        bookkeeping = _bookkeeping_us(engines["resident"].residency)
    finally:
        for engine in engines.values():
            engine.close()
    # CPU time (every thread of this process) is what the code costs; wall time on a shared machine
    # carries the neighbours' load too
    out = {name: {"round_p50_ms": wall[name], "p50_ms": statistics.median(wall[name]),
                  "round_cpu_ms": cpu[name], "cpu_ms": statistics.median(cpu[name])} for name in engines}
    out["resident_over_whole"] = {k: round(out["resident"][k] / out["whole"][k], 3) for k in ("p50_ms", "cpu_ms")}
    out["bookkeeping_us"] = bookkeeping
    return out


def _engine_probe(args, paths: dict[str, str], sizes: dict, budget: float, x: np.ndarray) -> dict:
    """`_probe`'s figures on REEF's engine in this process: each model switched in once (in order),
    then the same request resident (the best of three). Medians in ms."""
    engine = ReefEngine(discover_vgpus("cpu", cpu_vgpus=1)[0],
                        residency=ResidencySettings(int(budget), args.bandwidth_gb_s * 1e9))
    rows = []
    try:
        for model, path in paths.items():
            engine.load(model, path, args.executor, max_batch=MAX_BATCH)
        models = list(paths)[: args.probes or len(paths)]
        engine.run(models[-1], {"x": x}).result()  # the first probed model is out by its turn
        for model in models:
            start = time.perf_counter()
            engine.run(model, {"x": x}).result()
            cold = time.perf_counter() - start
            warm = []
            for _ in range(3):
                start = time.perf_counter()
                engine.run(model, {"x": x}).result()
                warm.append(time.perf_counter() - start)
            switch = engine.residency.stats.switches[-1]
            if switch.model != model:  # it was resident after all: nothing to measure
                continue
            rows.append({"startup_ms": (switch.first_launch_s - switch.requested_s) * 1e3,
                         "duration_ms": (switch.arrived_s - switch.requested_s) * 1e3,
                         "total_overhead_ms": (cold - min(warm)) * 1e3, "resident_ms": min(warm) * 1e3})
    finally:
        engine.close()
    out = {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}
    if args.bandwidth_gb_s:
        out["transfer_ms"] = round(statistics.median(sizes.values()) / (args.bandwidth_gb_s * 1e9) * 1e3, 3)
    out["switches"] = len(rows)
    return out


def _bookkeeping_us(residency, reps: int = 20000) -> dict:
    """What residency adds when a model is resident, timed alone: a batch's admission and release,
    and a launch's gate (a no-op kernel behind `GatedExecutor` vs the same kernel called directly)."""
    model = residency.resident()[0]
    start = time.perf_counter()
    for _ in range(reps):
        residency.admit(model, False, _nothing)
        residency.release(model)
    batch_us = (time.perf_counter() - start) / reps * 1e6

    class Kernel:
        def launch(self, state, index, stream=None):
            pass

    gated, plain = GatedExecutor(Kernel()), Kernel()
    state = SimpleNamespace(residency_gate=OPEN, residency_need=[0])
    per_launch = []
    for executor in (gated, plain):
        start = time.perf_counter()
        for _ in range(reps):
            executor.launch(state, 0)
        per_launch.append((time.perf_counter() - start) / reps * 1e6)
    return {"admit_release_per_batch": round(batch_us, 2), "gate_per_launch": round(per_launch[0] - per_launch[1], 3)}


def _nothing() -> None:
    """A batch's start, in `_bookkeeping_us`."""


def _switches(url: str) -> float:
    return servers.counter_total(url, "atoll_model_switches") or 0.0


def _infer_s(url: str, model: str, body) -> float:
    data, headers = body
    request = urllib.request.Request(f"{url}/v2/models/{model}/infer", data=data, headers=headers, method="POST")
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=300) as r:
        r.read()
    return time.perf_counter() - start


def _probe(url: str, models: list[str], body, weights: dict, args, loads: "ExplicitLoads | None") -> dict:
    """Each model switched in once on the idle server (models in order: under LRU each is gone by
    its turn), then the same request again, resident. Figures in ms, medians over the probes."""
    rows = []
    for model in models:
        if loads is None:
            counters = {k: servers.counter_total(url, f"atoll_model_switch_{k}_us", model=model) or 0.0
                        for k in ("startup", "duration")}  # fmt: skip
            cold = _infer_s(url, model, body)
            after = {k: servers.counter_total(url, f"atoll_model_switch_{k}_us", model=model) or 0.0
                     for k in counters}  # fmt: skip
            row = {k + "_ms": (after[k] - counters[k]) / 1e3 for k in counters}
        else:
            start = time.perf_counter()
            loads.load_now(model)
            row = {"load_ms": (time.perf_counter() - start) * 1e3}
            cold = _infer_s(url, model, body) + row["load_ms"] / 1e3
        warm = min(_infer_s(url, model, body) for _ in range(3))
        row.update(total_overhead_ms=(cold - warm) * 1e3, resident_ms=warm * 1e3)
        rows.append(row)
    keys = rows[0].keys()
    out = {k: round(statistics.median(r[k] for r in rows), 3) for k in keys}
    nbytes = statistics.median(weights[m] for m in models)
    if args.bandwidth_gb_s:
        out["transfer_ms"] = round(nbytes / (args.bandwidth_gb_s * 1e9) * 1e3, 3)
    out["switches"] = len(rows)
    out["model_mb"] = round(nbytes / MB, 2)
    return out


class ExplicitLoads:
    """A Triton user with more models than memory: models loaded while they fit `budget`; before a
    request for another, the least recently used idle ones are unloaded and it is loaded, one
    control call at a time (`guard(model)` around each request, for `run_load`)."""

    def __init__(self, url: str, sizes: dict[str, int], budget: float, loaded: list[str]):
        self.url, self.sizes, self.budget = url, sizes, budget
        self.loaded: OrderedDict[str, None] = OrderedDict.fromkeys(loaded)
        self.busy: Counter = Counter()
        self.loads = 0
        self._switching = False
        self._cond: asyncio.Condition | None = None

    @contextlib.asynccontextmanager
    async def guard(self, model: str):
        await self.make_room(model, use=True)
        try:
            yield
        finally:
            async with self._condition():
                self.busy[model] -= 1
                self._condition().notify_all()

    async def make_room(self, model: str, use: bool = False) -> None:
        """Have `model` loaded (and, with `use`, counted busy until the guard ends)."""
        while True:
            async with self._condition():
                if model in self.loaded:
                    self.loaded.move_to_end(model)
                    self.busy[model] += use
                    return
                victims = None if self._switching else self._victims(model)
                if victims is None:
                    await self._condition().wait()
                    continue
                self._switching = True
                for victim in victims:
                    del self.loaded[victim]
            try:
                for victim in victims:
                    await asyncio.to_thread(self._control, victim, "unload")
                await asyncio.to_thread(self._control, model, "load")
            finally:
                async with self._condition():
                    self.loaded[model] = None
                    self._switching = False
                    self.loads += 1
                    self._condition().notify_all()

    def load_now(self, model: str) -> None:
        """On an idle server (the probes): unload what must go and load `model`, here and now."""
        victims = self._victims(model) or []
        for victim in victims:
            self._control(victim, "unload")
            del self.loaded[victim]
        self._control(model, "load")
        self.loaded[model] = None

    def _victims(self, model: str) -> list[str] | None:
        free = self.budget - sum(self.sizes[m] for m in self.loaded)
        out = []
        for m in self.loaded:
            if free >= self.sizes[model]:
                break
            if not self.busy[m]:
                out.append(m)
                free += self.sizes[m]
        return out if free >= self.sizes[model] else None

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:  # made on the loop that uses it
            self._cond = asyncio.Condition()
        return self._cond

    def _control(self, model: str, action: str) -> None:
        request = urllib.request.Request(f"{self.url}/v2/repository/models/{model}/{action}", data=b"{}",
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=600) as r:
            r.read()


def _summary(results: dict) -> list[str]:
    lines = [f"{'run':9} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'switches/s':>10}"]
    for name, r in results.items():
        if "latency_ms" not in r:  # the in-process steps
            continue
        lat = r["latency_ms"]
        lines.append(f"{name:9} {r['throughput_rps']:>7} {lat['p50']:>8} {lat['p99']:>8} {r['switches_per_s']:>10}")
    for name, r in results.items():
        if "per_switch" in r:
            lines.append(f"{name} per switch: {r['per_switch']}")
    if "fit-cost" in results:
        fit = results["fit-cost"]
        for k in ("p50_ms", "cpu_ms"):
            lines.append(f"fit-cost {k}: whole {fit['whole'][k]}, resident {fit['resident'][k]} "
                         f"(x{fit['resident_over_whole'][k]})")
        lines.append(f"fit-cost bookkeeping (us): {fit['bookkeeping_us']}")
    return lines

