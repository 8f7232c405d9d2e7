"""`atoll bench preempt`: how fast an RT request gets the device while BE work keeps it busy.

A closed-loop BE client keeps the vGPU busy; RT requests arrive one at a time at random moments
(each a random while after the previous one ended, so each finds BE work running). Preemption latency is
the time from an RT request's arrival to its first kernel starting (CPU: the stream thread's clock;
CUDA: GPU events, see scheduler.cuda_device). Restore overhead is the scheduler's time to clear the
flag and re-submit the preempted BE tasks; `be_reruns` counts kernels executed twice. `rt-only` is
the same RT stream of requests on an idle vGPU.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
from scheduler.reef import DEFAULT_CAPACITY, Reef
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

MODELS = {"rt": "mobilenet_v3_small", "be": "squeezenet1_1"}
MODELS_CPU = {"rt": "mobilenet_v3_small", "be": "mobilenet_v3_small"}  # short BE kernels, see disb
DEFAULT_N = {"cpu": 100, "cuda": 300}


def register(subparsers) -> None:
    parser = subparsers.add_parser("preempt", help="preemption latency and restore overhead per policy")
    parser.add_argument("--policy", default=None,
                        help=f"comma-separated, from {', '.join((RT_ONLY,) + POLICY_ORDER)} (default: all)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--n", type=int, default=None, help="RT requests per policy")
    parser.add_argument("--cpu-cores", type=int, default=1, help="cores the CPU vGPU owns (see disb)")
    parser.add_argument("--capacities", default=None,
                        help="also sweep the vHQ capacity c under reset, e.g. 1,2,4,8")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the results JSON on stdout")
    parser.add_argument("--out", type=Path, default=None,
                        help="results file (default bench/results/preempt_<device>.json)")
    parser.add_argument("--plot", type=Path, default=None, help="PNG: preemption latency per policy")
    parser.set_defaults(func=run)


def measure(policy: str, kind: str, programs: dict, inputs: dict, n: int, seed: int,
            capacity: int | None = None) -> tuple[dict, list]:

    capacity = capacity or DEFAULT_CAPACITY
    ex, dev, _ = make_device(kind, measure_start=True)
    reef = Reef(ex, dev, "reset" if policy == RT_ONLY else policy, capacity=capacity, be_streams=1)
    reef.add_client("rt", programs["rt"], "rt")
    if policy != RT_ONLY:
        reef.add_client("be", programs["be"], "be")
    reef.prepare_padding()
    rec = Recorder()
    with reef:
        for c in ["rt"] + (["be"] if policy != RT_ONLY else []):
            reef.submit(c, inputs[c]).result()
        rt_solo = reef.submit("rt", inputs["rt"]).result()
        rt_s = rt_solo.end_s - rt_solo.arrival_s
        stop = threading.Event()
        be = None
        if policy != RT_ONLY:
            be = threading.Thread(target=closed_loop, args=(reef, "be", "be", inputs["be"], float("inf"), rec, stop))
            be.start()
        # Each RT request comes a random while (mean 3 RT durations) after the previous one
        # ended: BE work is running again by then, and no RT request queues behind another.
        rng = np.random.default_rng(seed)
        start = reef.clock()
        for _ in range(n):
            time.sleep(rt_s + rng.exponential(3 * rt_s))
            rec.add("rt", reef.submit("rt", inputs["rt"]).result())
        seconds = reef.clock() - start
        stop.set()
        if be is not None:
            be.join()
        stats = reef.stats
    dev.close()
    latency = [r.first_kernel_s - r.arrival_s for r in rec.rt]
    result = {
        "policy": policy,
        "preempt_latency_us": percentiles(latency, "us", digits=1),
        # Where it goes (CUDA, tasks launched by the native launcher): arrival .. the launch call
        # (our Python), and the call .. the first RT kernel seen running (driver + GPU).
        "arrival_to_launch_us": percentiles(
            [r.launched_s - r.arrival_s for r in rec.rt if r.launched_s], "us", digits=1),
        "launch_to_start_us": percentiles(
            [r.first_kernel_s - r.launched_s for r in rec.rt if r.launched_s], "us", digits=1),
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
    cores = pin_cpu_vgpu(args.cpu_cores) if args.device == "cpu" else None
    names = MODELS_CPU if args.device == "cpu" else MODELS
    programs = {"rt": load_program(names["rt"], args.device, args.seed),
                "be": load_program(names["be"], args.device, args.seed + 100)}
    inputs = {k: random_inputs(p, args.seed + i) for i, (k, p) in enumerate(programs.items())}
    n = args.n or DEFAULT_N[args.device]
    results, latencies = [], {}
    for policy in tqdm(policies, desc="preempt", unit="policy", file=sys.stderr):
        r, lat = measure(policy, args.device, programs, inputs, n, args.seed)
        results.append(r)
        latencies[policy] = lat
    sweep = []
    for c in [int(v) for v in args.capacities.split(",")] if args.capacities else []:
        sweep.append(measure("reset", args.device, programs, inputs, n, args.seed, capacity=c)[0])
    _, dev, description = make_device(args.device)
    dev.close()
    if cores is not None:
        description = f"{description}, pinned to cores {cores}"
    out = {"device": description, "models": names, "rt_requests_per_policy": n, "results": results}
    if sweep:
        out["capacity_sweep"] = sweep
    path = Path(args.out or Path("bench/results") / f"preempt_{args.device}.json")
    if args.plot:
        plot(latencies, f"preemption latency on {description}", args.plot)
    emit(out, path, args.json, [
        f"{r['policy']:>8}: preemption p50 {r['preempt_latency_us']['p50']} us"
        f"  p99 {r['preempt_latency_us']['p99']} us  max {r['preempt_latency_us']['max']} us"
        f"  restore {r['restore_overhead_us']} us"
        for r in results])
    return 0
