"""`atoll simulate`: run a batcher on simulated time with service times from a knee profile.

Batchers compared (same arrivals and lengths for each, drawn from --seed per rate):
- preba: Batch_max = Batch_knee per bucket, Time_queue = Time_knee / vGPUs.
- triton: one queue, max_batch_size = the model's largest Batch_knee, max_queue_delay = its largest
  Time_knee (the most permissive knee settings a Triton operator could read off the profile);
  --triton-max-batch / --triton-delay-us override them for sensitivity runs.
- preba-eager: preba, but timed-out batches also go to busy vGPUs (short_batches_wait_for_idle=False).
- static: fixed batch = the Batch_knee of the bucket holding the mean input length (or
  --static-batch), flushed only after --static-timeout-ms so a run's tail drains.

For image models the plan also says how many DPU image CUs each offered rate needs: ceil(rate x
one CU's time per image), that time from --dpu-image-ms or the DPU cycle model
(hls/image/dpu_cycles.json) on an ImageNet-sized JPEG (500x375, quality 90, to 224x224).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np
from batching import BATCHERS, DEFAULT_BATCHER, BatcherSettings, TritonConfig
from batching.factory import VARIANTS, variant
from batching.profile import load_profile, service_time_from
from batching.sim import simulate
from batching.sweep import max_rate_at_slo, parse_rates
from batching.workload import arrival_times, input_lengths
from fpga_host import dpu_cycles
from tqdm import tqdm

from atoll.bench.corpus import jpeg_bytes

def register(subparsers) -> None:
    p = subparsers.add_parser("simulate", help="simulate a batcher on vGPUs from a knee profile")
    p.add_argument("--profile", required=True, help="knee profile JSON (batching/profiles/*.json)")
    p.add_argument("--vgpus", type=int, default=7, help="number of vGPUs of the profile's kind")
    p.add_argument("--model", required=True)
    p.add_argument("--arrival", choices=("poisson", "uniform"), default="poisson")
    p.add_argument("--rate", type=float, help="offered load, requests/s (without --sweep)")
    p.add_argument("--lengths", default="librispeech", help="librispeech | fixed:SECONDS (audio)")
    p.add_argument("--batcher", choices=(*BATCHERS, *VARIANTS),
                   help=f"default: {DEFAULT_BATCHER}; with --sweep, {', '.join(BATCHERS)} side by side")
    p.add_argument("--duration", type=float, default=30.0, help="simulated seconds of arrivals")
    p.add_argument("--warmup", type=float, help="seconds excluded from metrics (default 10%%)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slo-ms", type=float, default=100.0, help="p95 latency SLO for --sweep")
    p.add_argument("--sweep", action="store_true", help="sweep the offered rate")
    p.add_argument("--rates", help="START:STOP:STEP for --sweep (default: 10%%..150%% of an "
                                   "estimate of capacity, 15 points)")
    p.add_argument("--triton-max-batch", type=int, help="override triton's max_batch_size")
    p.add_argument("--triton-delay-us", type=int, help="override triton's max_queue_delay_microseconds")
    p.add_argument("--static-batch", type=int, help="static batcher's batch size")
    p.add_argument("--static-timeout-ms", type=float, default=1000.0)
    p.add_argument("--dpu-image-ms", type=float,
                   help="one DPU image CU's time per image (default for image models: the DPU cycle model "
                        "on a 500x375 JPEG)")
    p.add_argument("--plot", help="PNG of throughput vs p95 latency per batcher")
    p.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        report = simulate_command(args)
    except ValueError as e:  # includes ProfileError
        print(f"atoll simulate: {e}", file=sys.stderr)
        return 2
    if args.plot:
        plot(report, args.plot)
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
    else:
        print_table(report)
    return 0


def simulate_command(args: argparse.Namespace) -> dict:
    if args.vgpus < 1 or not args.duration > 0:
        raise ValueError("--vgpus must be >= 1 and --duration > 0")
    if not args.sweep and args.rate is None:
        raise ValueError("give --rate, or --sweep")
    profile = load_profile(args.profile)
    model = profile.model(args.model)
    vgpus = {f"vgpu{i}": profile.kind for i in range(args.vgpus)}
    service_time = service_time_from({profile.kind: profile})
    lengths_spec = args.lengths if model.modality == "audio" else "fixed:1"
    input_lengths(lengths_spec, 1, np.random.default_rng(0))  # validate the spec early
    mean_length = float(input_lengths(lengths_spec, 20000, np.random.default_rng(args.seed)).mean())
    policy = profile.model_batching(args.model)
    typical = policy.buckets[policy.bucket_of(min(mean_length, policy.buckets[-1].max_length))]
    names = [args.batcher] if args.batcher else (list(BATCHERS) if args.sweep else [DEFAULT_BATCHER])
    kinds = {name: variant(name, batcher_settings(profile, args, typical.batch_max)) for name in names}
    if args.sweep:
        rates = parse_rates(args.rates) if args.rates else default_rates(
            args.vgpus * typical.batch_max / typical.time_knee)
    else:
        rates = [args.rate]
    warmup = 0.1 * args.duration if args.warmup is None else args.warmup

    runs: dict[str, list[dict]] = {name: [] for name in names}
    with tqdm(total=len(rates) * len(names), desc="simulate", unit="run", file=sys.stderr,
              disable=len(rates) * len(names) == 1) as bar:
        for rate in rates:
            rng = np.random.default_rng(args.seed)
            arrivals = arrival_times(args.arrival, rate, args.duration, rng)
            lengths = input_lengths(lengths_spec, len(arrivals), rng)
            for name in names:
                kind, settings = kinds[name]
                result = simulate(kind.build(vgpus, service_time, settings), args.model, arrivals, lengths,
                                  vgpus, service_time, args.duration, warmup)
                runs[name].append({"rate_rps": rate, **result.to_json()})
                bar.update()

    report = {
        "profile": args.profile, "kind": profile.kind, "model": args.model, "vgpus": args.vgpus,
        "arrival": args.arrival, "lengths": lengths_spec, "duration_s": args.duration,
        "warmup_s": warmup, "seed": args.seed,
        "batchers": {name: {"params": kind.knobs(settings, args.model, args.vgpus), "runs": runs[name]}
                     for name, (kind, settings) in kinds.items()},
    }
    if args.dpu_image_ms is not None or model.modality == "image":
        report["dpu"] = dpu_plan(rates, args.dpu_image_ms)
    if args.sweep:
        report["slo_ms"] = args.slo_ms
        for name in names:
            entry = report["batchers"][name]
            entry["max_rate_at_slo_rps"] = max_rate_at_slo(
                [r["rate_rps"] for r in entry["runs"]],
                [r["latency_ms"]["p95"] for r in entry["runs"]], args.slo_ms)
    return report


def dpu_plan(rates: list[float], image_ms: float | None) -> dict:
    """Image CUs each offered rate needs, at one CU's time per image (given, or modelled)."""
    source = "--dpu-image-ms"
    if image_ms is None:
        model = dpu_cycles.load()
        image_ms = model.seconds(model.image_cycles(jpeg_bytes(500, 375), 224, 224)) * 1e3
        source = f"{dpu_cycles.DEFAULT_MODEL.name} on a 500x375 JPEG to 224x224"
    return {"image_ms": round(image_ms, 4), "source": source,
            "cus_needed": [{"rate_rps": r, "cus": math.ceil(r * image_ms / 1e3)} for r in rates]}


def default_rates(capacity_rps: float) -> list[float]:
    return [round(capacity_rps * f, 1) for f in (0.1 * k for k in range(1, 16))]


def batcher_settings(profile, args, typical_batch: int) -> BatcherSettings:
    """Every batcher's settings for `args.model` from the profile, as the module docstring says."""
    buckets = profile.model(args.model).buckets
    delay_us = (args.triton_delay_us if args.triton_delay_us is not None
                else round(max(b.time_knee_ms for b in buckets) * 1e3))
    triton = TritonConfig(args.triton_max_batch or max(b.batch_knee for b in buckets), delay_us)
    return BatcherSettings(policies={args.model: profile.model_batching(args.model)}, triton={args.model: triton},
                           static_batch=args.static_batch or typical_batch,
                           static_timeout_s=args.static_timeout_ms / 1e3)


def print_table(report: dict) -> None:
    print(f"{report['model']} on {report['vgpus']} x {report['kind']}, {report['arrival']} arrivals, "
          f"lengths {report['lengths']}")
    print(f"{'batcher':11} {'rate/s':>9} {'thr/s':>9} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9} "
          f"{'batch':>6} {'util':>6}")
    for name, entry in report["batchers"].items():
        for r in entry["runs"]:
            lat = r["latency_ms"]
            print(f"{name:11} {r['rate_rps']:9.1f} {r['throughput_rps']:9.1f} {lat['p50']:9.1f} "
                  f"{lat['p95']:9.1f} {lat['p99']:9.1f} {r['mean_batch_size']:6.1f} "
                  f"{r['vgpu_utilisation']:6.2f}")
        if "max_rate_at_slo_rps" in entry:
            print(f"{name:11} max rate at p95 <= {report['slo_ms']:g} ms: "
                  f"{entry['max_rate_at_slo_rps']} req/s")
    if "dpu" in report:
        dpu = report["dpu"]
        print(f"DPU image CU: {dpu['image_ms']:g} ms an image ({dpu['source']}); CUs needed: "
              + ", ".join(f"{c['cus']} at {c['rate_rps']:g}/s" for c in dpu["cus_needed"]))


def plot(report: dict, path: str) -> None:
    import matplotlib  # heavy: only --plot draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy: only --plot draws

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, entry in report["batchers"].items():
        ax.plot([r["throughput_rps"] for r in entry["runs"]],
                [r["latency_ms"]["p95"] for r in entry["runs"]], marker="o", label=name)
    if "slo_ms" in report:
        ax.axhline(report["slo_ms"], color="grey", linestyle="--", label=f"SLO {report['slo_ms']:g} ms")
    ax.set_xlabel("throughput (requests/s)")
    ax.set_ylabel("p95 latency (ms)")
    ax.set_yscale("log")
    ax.set_title(f"{report['model']}, {report['vgpus']} x {report['kind']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
