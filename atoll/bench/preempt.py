"""`atoll bench preempt`: how fast an RT request gets the device while BE work keeps it busy.

Closed-loop BE clients keep the vGPU busy; RT requests arrive one at a time, each a random while
after the previous one ended, so each finds BE work running. Preemption latency is arrival -> first
RT kernel start (CPU: the stream thread's clock; CUDA: GPU events, see scheduler.cuda_device);
restore overhead is the scheduler's time to clear the flag and re-submit the preempted BE tasks
(`be_reruns` counts kernels run twice). `rt-only` sends the same RT requests to an idle vGPU; each
policy's RT overhead is its median RT latency over rt-only's, minus one. `--be-load idle`: one
batch-1 client (most of its kernels fill few SMs); `saturate`: a conv net and a GEMM-heavy model at
a large batch, each on a BE stream of its own, so every SM holds BE blocks when an RT request arrives.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from atoll.bench.harness import (
    POLICY_ORDER,
    RT_ONLY,
    Recorder,
    closed_loop,
    emit,
    load_program,
    make_device,
    percentiles,
    pin_cpu_vgpu,
    policies_from,
    random_inputs,
)
from scheduler.reef import DEFAULT_CAPACITY, Reef

RT_MODEL = "mobilenet_v3_small"
# BE clients per load and device: model -> batch. On CPU vGPUs a BE kernel can't be cut short, so
# the idle load uses a BE model with short NumPy kernels (see disb) and saturation small batches.
BE_LOADS = {
    "idle": {"cuda": {"squeezenet1_1": 1}, "cpu": {"mobilenet_v3_small": 1}},
    "saturate": {"cuda": {"squeezenet1_1": 32, "swin_t": 32},
                 "cpu": {"mobilenet_v3_small": 4, "conformer": 4}},
}
SHORT = {"n": 5, "batch": 2}  # --short: a few RT requests, BE batches of 2 (a test's run)
DEFAULT_N = {"cpu": 100, "cuda": 300}
QUANTILES = (50, 99, 99.9)


def register(subparsers) -> None:
    parser = subparsers.add_parser("preempt", help="preemption latency and restore overhead per policy")
    parser.add_argument("--policy", default=None,
                        help=f"comma-separated, from {', '.join((RT_ONLY,) + POLICY_ORDER)} (default: all)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--be-load", default="idle",
                        help=f"comma-separated, from {', '.join(BE_LOADS)}: the BE work RT requests "
                             "preempt (saturate: every SM busy)")
    parser.add_argument("--n", type=int, default=None, help="RT requests per policy")
    parser.add_argument("--short", action="store_true",
                        help=f"{SHORT['n']} RT requests per policy and BE batches of {SHORT['batch']}")
    parser.add_argument("--cpu-cores", type=int, default=1, help="cores the CPU vGPU owns (see disb)")
    parser.add_argument("--capacities", default=None,
                        help="also sweep the vHQ capacity c under reset, e.g. 1,2,4,8")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the results JSON on stdout")
    parser.add_argument("--out", type=Path, default=None,
                        help="results file (default bench/results/preempt_<device>.json)")
    parser.add_argument("--plot", type=Path, default=None, help="PNG: preemption latency per policy")
    parser.set_defaults(func=run)


def loads_from(arg: str) -> list[str]:
    names = [a.strip() for a in arg.split(",") if a.strip()]
    unknown = [n for n in names if n not in BE_LOADS]
    if unknown or not names:
        raise SystemExit(f"atoll bench preempt: unknown BE load {', '.join(unknown) or arg!r}; "
                         f"choose from {', '.join(BE_LOADS)}")
    return names


def be_clients(load: str, device: str, short: bool) -> dict[str, int]:
    """model -> batch of the BE clients of `load` on `device`."""
    clients = BE_LOADS[load][device]
    return {m: min(b, SHORT["batch"]) if short else b for m, b in clients.items()}


def measure(policy: str, kind: str, rt, be: dict, inputs: dict, n: int, seed: int,
            capacity: int | None = None) -> tuple[dict, list]:
    """One policy: `rt` the RT program, `be` {client: program} run in closed loops (none for
    rt-only), each on a BE stream of its own."""
    capacity = capacity or DEFAULT_CAPACITY
    ex, dev, _ = make_device(kind, measure_start=True)
    be = {} if policy == RT_ONLY else be
    reef = Reef(ex, dev, "reset" if policy == RT_ONLY else policy, capacity=capacity,
                be_streams=max(1, len(be)))
    reef.add_client("rt", rt, "rt")
    for client, program in be.items():
        reef.add_client(client, program, "be")
    reef.prepare_padding()
    rec = Recorder()
    with reef:
        for c in ["rt", *be]:
            reef.submit(c, inputs[c]).result()
        rt_solo = reef.submit("rt", inputs["rt"]).result()
        rt_s = rt_solo.end_s - rt_solo.arrival_s
        stop = threading.Event()
        loops = [threading.Thread(target=closed_loop, args=(reef, c, "be", inputs[c], float("inf"), rec, stop))
                 for c in be]
        for t in loops:
            t.start()
        # Each RT request comes a random while (mean 3 RT durations) after the previous one
        # ended: BE work is running again by then, and no RT request queues behind another.
        rng = np.random.default_rng(seed)
        start = reef.clock()
        for _ in range(n):
            time.sleep(rt_s + rng.exponential(3 * rt_s))
            rec.add("rt", reef.submit("rt", inputs["rt"]).result())
        seconds = reef.clock() - start
        stop.set()
        for t in loops:
            t.join()
        stats = reef.stats
    dev.close()
    latency = [r.first_kernel_s - r.arrival_s for r in rec.rt]
    result = {
        "policy": policy,
        "preempt_latency_us": percentiles(latency, "us", qs=QUANTILES, digits=1),
        # Where it goes (CUDA, tasks launched by the native launcher): arrival .. the launch call
        # (our Python), and the call .. the first RT kernel seen running (driver + GPU).
        "arrival_to_launch_us": percentiles(
            [r.launched_s - r.arrival_s for r in rec.rt if r.launched_s], "us", qs=QUANTILES, digits=1),
        "launch_to_start_us": percentiles(
            [r.first_kernel_s - r.launched_s for r in rec.rt if r.launched_s], "us", qs=QUANTILES,
            digits=1),
        "restore_overhead_us": round(statistics.mean(stats.restore_s) * 1e6, 1) if stats.restore_s else 0.0,
        "flush_us": percentiles(stats.flush_s, "us", digits=1),
        "rt_started_on_arrival": stats.rt_started_on_arrival,
        "rt_latency_ms": round(statistics.median(r.end_s - r.arrival_s for r in rec.rt) * 1e3, 3),
        "be_preemptions": sum(r.preemptions for r in rec.be_done),
        "be_reruns": sum(r.reruns for r in rec.be_done),
        "be_completed": len(rec.be_done),
        "be_throughput_rps": round(len(rec.be_done) / seconds, 3),
        "capacity": capacity,
    }
    return result, latency


def with_overhead(results: list[dict]) -> None:
    """Each row's RT overhead: its median RT latency over rt-only's, minus one (rt-only ran)."""
    alone = next((r["rt_latency_ms"] for r in results if r["policy"] == RT_ONLY), None)
    for r in results:
        r["rt_overhead"] = round(r["rt_latency_ms"] / alone - 1, 4) if alone else None


def plot(latencies: dict[str, list[float]], title: str, path: Path) -> None:
    import matplotlib  # heavy: only --plot draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy: only --plot draws

    names = list(latencies)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.boxplot([np.asarray(latencies[k]) * 1e6 for k in names], whis=(1, 99), showfliers=True)
    ax.set_xticks(range(1, len(names) + 1), names)
    ax.set_yscale("log")
    ax.set_ylabel("preemption latency (us, log)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def run(args) -> int:
    policies = policies_from(args.policy)
    loads = loads_from(args.be_load)
    cores = pin_cpu_vgpu(args.cpu_cores) if args.device == "cpu" else None
    rt = load_program(RT_MODEL, args.device, args.seed)
    inputs = {"rt": random_inputs(rt, args.seed)}
    be = {}
    for load in loads:
        be[load] = {}
        for i, (model, batch) in enumerate(be_clients(load, args.device, args.short).items()):
            client = f"be-{model}-b{batch}"
            be[load][client] = load_program(model, args.device, args.seed + 100 + i, batch)
            inputs[client] = random_inputs(be[load][client], args.seed + 1 + i)
    n = args.n or (SHORT["n"] if args.short else DEFAULT_N[args.device])
    runs = ([(RT_ONLY, None)] if RT_ONLY in policies else []) + [
        (p, load) for load in loads for p in policies if p != RT_ONLY]
    results, latencies = [], {}
    for policy, load in tqdm(runs, desc="preempt", unit="run", file=sys.stderr):
        r, lat = measure(policy, args.device, rt, be.get(load, {}), inputs, n, args.seed)
        results.append({"be_load": load or "none", **r})
        latencies[policy if load is None else f"{policy} ({load})"] = lat
    with_overhead(results)
    sweep = []
    for c in [int(v) for v in args.capacities.split(",")] if args.capacities else []:
        sweep.append(measure("reset", args.device, rt, be[loads[0]], inputs, n, args.seed,
                             capacity=c)[0])
    _, dev, description = make_device(args.device)
    dev.close()
    if cores is not None:
        description = f"{description}, pinned to cores {cores}"
    models = {"rt": RT_MODEL, "be": {load: be_clients(load, args.device, args.short) for load in loads}}
    out = {"device": description, "models": models, "rt_requests_per_policy": n, "results": results}
    if sweep:
        out["capacity_sweep"] = sweep
    path = Path(args.out or Path("bench/results") / f"preempt_{args.device}.json")
    if args.plot:
        plot(latencies, f"preemption latency on {description}", args.plot)
    emit(out, path, args.json, [
        f"{r['policy']:>8} {r['be_load']:>8}: preemption p50 {r['preempt_latency_us']['p50']} us"
        f"  p99 {r['preempt_latency_us']['p99']} us  p99.9 {r['preempt_latency_us']['p99.9']} us"
        f"  RT overhead {r['rt_overhead']}  restore {r['restore_overhead_us']} us"
        for r in results])
    return 0
