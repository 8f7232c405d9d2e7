"""`atoll bench disb`: REEF's DISB workloads A-E on one vGPU, every policy side by side.

  A  one RT client, periodic 100 req/s, plus one closed-loop BE client
  B  one closed-loop RT client plus one closed-loop BE client
  C  one RT client, periodic 100 req/s, plus five closed-loop BE clients of different models
  D  five RT clients of different models, periodic 20 req/s each, plus the five BE clients
  E  as D with Poisson arrivals

Each policy and an RT-only reference run `--duration` s in turn, zoo models at batch 1; the rates
are scaled down where the RT clients alone would keep the device over `TARGET_RT_LOAD` busy."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scheduler.reef import DEFAULT_CAPACITY, Reef
from tqdm import tqdm

from atoll.bench.harness import (
    AUDIO_FRAMES,
    IMAGE_SIZE_CPU,
    POLICY_ORDER,
    RT_ONLY,
    Recorder,
    closed_loop,
    emit,
    load_program,
    make_device,
    open_loop,
    percentiles,
    pin_cpu_vgpu,
    plot_cdf,
    policies_from,
    random_inputs,
    solo_latency_s,
)

FIVE = ("mobilenet_v3_small", "squeezenet1_1", "swin_t", "conformer", "citrinet")
TARGET_RT_LOAD = {"cpu": 0.15, "cuda": 0.5}


@dataclass(frozen=True)
class Workload:
    rt: tuple[str, ...]  # one RT client per model
    rt_rate: float | None  # req/s per RT client; None = closed loop
    poisson: bool
    be: tuple[str, ...]  # one closed-loop BE client per model
    # On CPU vGPUs a BE kernel can't be cut short, so A/B use BE models whose longest NumPy kernel
    # is short next to the RT task (the quantity reset preemption latency is bounded by there).
    be_cpu: tuple[str, ...] | None = None


WORKLOADS = {
    "A": Workload(("mobilenet_v3_small",), 100.0, False, ("squeezenet1_1",), ("mobilenet_v3_small",)),
    "B": Workload(("mobilenet_v3_small",), None, False, ("squeezenet1_1",), ("mobilenet_v3_small",)),
    "C": Workload(("mobilenet_v3_small",), 100.0, False, FIVE),
    "D": Workload(FIVE, 20.0, False, FIVE),
    "E": Workload(FIVE, 20.0, True, FIVE),
}


def register(subparsers) -> None:
    parser = subparsers.add_parser("disb", help="REEF DISB workloads: RT latency and throughput per policy")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), required=True)
    parser.add_argument("--policy", default=None,
                        help=f"comma-separated, from {', '.join((RT_ONLY,) + POLICY_ORDER)} (default: all, side by side)")
    parser.add_argument("--duration", type=float, default=None,
                        help="seconds per policy (default 20 on cpu, 5 on cuda)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--capacity", type=int, default=None, help="vHQ outstanding kernels (c)")
    parser.add_argument("--cpu-cores", type=int, default=1,
                        help="cores the CPU vGPU owns (its 'SMs'; default 1): the process is pinned to them")
    parser.add_argument("--rounds", type=int, default=None,
                        help="interleaved rounds the duration is split into (default 6 on cpu, 1 on cuda)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the results JSON on stdout")
    parser.add_argument("--out", type=Path, default=None,
                        help="results file (default bench/results/disb_<W>_<device>.json)")
    parser.add_argument("--plot", type=Path, default=None, help="PNG: RT latency CDF per policy")
    parser.set_defaults(func=run)


def run_policy(policy: str, kind: str, workload: Workload, programs: dict, inputs: dict,
               rate: float | None, duration: float, capacity: int | None, seed: int) -> dict:

    ex, dev, _ = make_device(kind, measure_start=True)
    be = [] if policy == RT_ONLY else list(programs["be"])
    reef = Reef(ex, dev, "reset" if policy == RT_ONLY else policy,
                capacity=capacity or DEFAULT_CAPACITY, be_streams=max(1, len(be)))
    for name in programs["rt"]:
        reef.add_client(name, programs["rt"][name], "rt")
    for name in be:
        reef.add_client(name, programs["be"][name], "be")
    reef.prepare_padding()
    rec = Recorder()
    rng = np.random.default_rng(seed)
    with reef:
        for name in list(programs["rt"]) + be:  # warm-up: caches, first-launch compilation
            reef.submit(name, inputs[name]).result()
        start = reef.clock()
        stop_at = start + duration
        closed = [threading.Thread(target=closed_loop, args=(reef, n, "be", inputs[n], stop_at, rec))
                  for n in be]
        opened = []
        for n in programs["rt"]:
            if rate is None:
                closed.append(threading.Thread(target=closed_loop, args=(reef, n, "rt", inputs[n], stop_at, rec)))
            else:
                opened.append(threading.Thread(target=open_loop, args=(
                    reef, n, inputs[n], rate, workload.poisson, start, stop_at,
                    np.random.default_rng(rng.integers(1 << 30)), rec)))
        for t in closed + opened:
            t.start()
        for t in opened:
            t.join()
        for f in rec.pending:
            rec.add("rt", f.result())
        for t in closed:  # closed loops end with their in-flight request
            t.join()
        stats = reef.stats
    dev.close()
    inside = [r for r in rec.rt if r.arrival_s < stop_at]
    return {
        "rt_latency_s": [r.end_s - r.arrival_s for r in inside],
        "rt_start_delay_s": [r.first_kernel_s - r.arrival_s for r in inside],
        "rt_done": sum(1 for r in rec.rt if r.end_s <= stop_at),
        "be_done": sum(1 for r in rec.be_done if r.end_s <= stop_at),
        "seconds": duration,
        "be_preemptions": sum(r.preemptions for r in rec.be_done),
        "be_reruns": sum(r.reruns for r in rec.be_done),
        "padded_kernels": stats.padded_kernels,
    }


def merge(policy: str, rounds: list[dict]) -> dict:
    """One policy's rounds pooled: latencies concatenated, counts summed over the total time."""
    pooled = {k: sum((r[k] for r in rounds), [] if isinstance(rounds[0][k], list) else 0)
              for k in rounds[0]}
    seconds = pooled["seconds"]
    return {
        "policy": policy,
        "rt_latency_ms": percentiles(pooled["rt_latency_s"]),
        "rt_start_delay_ms": percentiles(pooled["rt_start_delay_s"]),
        "throughput_rps": {"overall": round((pooled["rt_done"] + pooled["be_done"]) / seconds, 3),
                           "be": round(pooled["be_done"] / seconds, 3),
                           "rt": round(pooled["rt_done"] / seconds, 3)},
        "be_preemptions": pooled["be_preemptions"],
        "be_reruns": pooled["be_reruns"],
        "padded_kernels": pooled["padded_kernels"],
    }


def summarise(results: list[dict]) -> None:
    """Ratios against the RT-only reference, measured in the same invocation."""
    ref = next((r for r in results if r["policy"] == RT_ONLY), None)
    if ref is None or not ref["rt_latency_ms"]["p99"]:
        return
    for r in results:
        p99 = r["rt_latency_ms"]["p99"]
        r["rt_p99_vs_rt_only"] = round(p99 / ref["rt_latency_ms"]["p99"], 3) if p99 else None
        r["rt_p50_vs_rt_only"] = (round(r["rt_latency_ms"]["p50"] / ref["rt_latency_ms"]["p50"], 3)
                                  if r["rt_latency_ms"]["p50"] else None)
        r["throughput_vs_rt_only"] = round(r["throughput_rps"]["overall"] / ref["throughput_rps"]["overall"], 3)

def run(args) -> int:
    policies = policies_from(args.policy)
    cores = pin_cpu_vgpu(args.cpu_cores) if args.device == "cpu" else None
    workload = WORKLOADS[args.workload]
    duration = args.duration or (20.0 if args.device == "cpu" else 5.0)
    be_models = workload.be_cpu if args.device == "cpu" and workload.be_cpu else workload.be
    print(f"disb {args.workload}: importing {len(set(workload.rt) | set(be_models))} zoo models",
          file=sys.stderr)
    programs = {"rt": {}, "be": {}}
    for k, m in enumerate(workload.rt):
        programs["rt"][f"rt{k}-{m}"] = load_program(m, args.device, seed=args.seed + k)
    for k, m in enumerate(be_models):
        programs["be"][f"be{k}-{m}"] = load_program(m, args.device, seed=args.seed + 100 + k)
    inputs = {n: random_inputs(p, args.seed + i) for i, (n, p) in
              enumerate(list(programs["rt"].items()) + list(programs["be"].items()))}
    rate, scale, solo = None, 1.0, {}
    if workload.rt_rate is not None:
        solo = {n: solo_latency_s(args.device, p, inputs[n]) for n, p in programs["rt"].items()}
        load = workload.rt_rate * sum(solo.values())
        scale = min(1.0, TARGET_RT_LOAD[args.device] / load)
        rate = workload.rt_rate * scale
    rounds = args.rounds or (6 if args.device == "cpu" else 1)
    raw: dict[str, list[dict]] = {p: [] for p in policies}
    # Interleaved rounds, each starting at another policy: a shared machine's load drifts, and
    # side-by-side ratios should not depend on which policy happened to run during a busy spell.
    order = [(k, policies[(k + i) % len(policies)]) for k in range(rounds) for i in range(len(policies))]
    for k, policy in tqdm(order, desc=f"disb {args.workload}", unit="run", file=sys.stderr):
        raw[policy].append(run_policy(policy, args.device, workload, programs, inputs, rate,
                                      duration / rounds, args.capacity, args.seed + k))
    results = [merge(p, raw[p]) for p in policies]
    latencies = {p: sum((r["rt_latency_s"] for r in raw[p]), []) for p in policies}
    summarise(results)
    _, dev, description = make_device(args.device)
    dev.close()
    if cores is not None:
        description = f"{description}, pinned to cores {cores}"
    out = {
        "workload": args.workload,
        "device": description,
        "duration_s": duration,
        "rounds": rounds,
        "models": {"rt": list(workload.rt), "be": list(be_models)},
        "inputs": {"image_size": IMAGE_SIZE_CPU if args.device == "cpu" else 224,
                   "audio_frames": AUDIO_FRAMES[args.device], "batch": 1},
        "rt_arrivals": "closed-loop" if rate is None else ("poisson" if workload.poisson else "periodic"),
        "rt_rate_per_client_rps": None if rate is None else round(rate, 3),
        "rate_scale": round(scale, 4),
        "rt_solo_latency_ms": {n: round(v * 1e3, 3) for n, v in solo.items()},
        "results": results,
    }
    path = Path(args.out or Path("bench/results") / f"disb_{args.workload}_{args.device}.json")
    if args.plot:
        plot_cdf(latencies, f"DISB {args.workload} on {description}", args.plot)
    emit(out, path, args.json, [
        f"{r['policy']:>8}: RT p50 {r['rt_latency_ms']['p50']} ms  p99 {r['rt_latency_ms']['p99']} ms"
        f"  throughput {r['throughput_rps']['overall']} req/s (BE {r['throughput_rps']['be']})"
        for r in results])
    return 0
