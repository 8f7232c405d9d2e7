"""`atoll bench disb`: REEF's DISB workloads A-E on one vGPU, every policy side by side.

  A  one RT client, periodic 100 req/s, plus one closed-loop BE client
  B  one closed-loop RT client plus one closed-loop BE client
  C  one RT client, periodic 100 req/s, plus five closed-loop BE clients of different models
  D  five RT clients of different models, periodic 20 req/s each, plus the five BE clients
  E  as D with Poisson arrivals

Each policy (and an RT-only reference: the same RT clients with no BE work) runs for `--duration`
seconds in turn in one invocation, on the zoo models at batch 1. RT latency is arrival to result;
throughput counts requests completed inside the window. Where the device cannot sustain the nominal
RT rates (the NumPy executor on a CPU vGPU), every rate is scaled by one factor so that the RT
clients alone would keep the device `TARGET_RT_LOAD` busy (CPU: 15%, leaving room for the noise
of a shared machine; CUDA: 50%, so nominal rates stand unless a model is slow); the factor is in
the JSON. CPU vGPUs also use smaller inputs (IMAGE_SIZE_CPU, AUDIO_FRAMES), also recorded.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from atoll.bench.output import emit

RT_ONLY = "rt-only"
POLICY_ORDER = ("seq", "streams", "wait", "reset", "reef")
FIVE = ("mobilenet_v3_small", "squeezenet1_1", "swin_t", "conformer", "citrinet")
TARGET_RT_LOAD = {"cpu": 0.15, "cuda": 0.5}
IMAGE_SIZE_CPU = 112
FIXED_SIZE = {"swin_t"}  # its window partition is built for 224x224
AUDIO_FRAMES = {"cpu": 64, "cuda": 300}


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
                        help=f"one of {', '.join((RT_ONLY,) + POLICY_ORDER)} (default: all, side by side)")
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


def policies_from(arg: str | None) -> list[str]:
    if arg is None:
        return [RT_ONLY, *POLICY_ORDER]
    if arg not in (RT_ONLY, *POLICY_ORDER):
        raise SystemExit(f"atoll bench: unknown policy {arg!r}; choose from {', '.join((RT_ONLY,) + POLICY_ORDER)}")
    return [arg]


# ---- models and devices ------------------------------------------------------------------------

def zoo_model(name: str, device: str, seed: int):
    """A zoo model as ONNX; on CPU vGPUs image models get smaller inputs (the graphs are
    resolution-free up to their global pooling)."""
    from gpu_runtime import zoo

    model = zoo.build(name, seed=seed)
    if zoo.MODELS[name].kind == "image" and device == "cpu" and name not in FIXED_SIZE:
        dims = model.graph.input[0].type.tensor_type.shape.dim
        dims[2].dim_value = dims[3].dim_value = IMAGE_SIZE_CPU
    return model


def load_program(name: str, device: str, seed: int):
    """Import a zoo model (`zoo_model`) for batch 1."""
    from gpu_runtime import zoo
    from gpu_runtime.compiler.importer import import_model

    model = zoo_model(name, device, seed)
    length = None if zoo.MODELS[name].kind == "image" else AUDIO_FRAMES[device]
    return import_model(model, batch=1, length=length, name=f"{name}-{seed}")


def random_inputs(program, seed: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(program.buffers[i].shape).astype(np.float32)
            for name, i in program.inputs.items()}


def make_device(kind: str):
    """(executor, scheduler device, description) for a vGPU of this kind."""
    if kind == "cpu":
        from gpu_runtime.executors.numpy_executor import NumpyExecutor
        from scheduler.cpu_device import CpuDevice

        # One BLAS thread per stream thread: a stream is the CPU's unit of parallelism, and
        # nested BLAS pools would oversubscribe the cores whenever two streams run.
        ex = NumpyExecutor(blas_threads=1)
        return ex, CpuDevice(ex), f"cpu vGPU ({os.cpu_count()} cores, numpy executor)"
    try:
        from gpu_runtime.executors.cupy_executor import CupyExecutor
        from scheduler.cuda_device import CudaDevice

        ex = CupyExecutor()
        dev = CudaDevice(ex)
    except Exception as e:  # no cupy, no driver, no device: a user mistake, not a crash
        raise SystemExit(f"atoll bench: --device cuda is unavailable here: {e}") from None
    return ex, dev, dev.description


def solo_latency_s(kind: str, program, inputs, reps: int = 5, warmup: int = 2) -> float:
    """Median end-to-end time of one request alone (used to scale rates to what the device does)."""
    from scheduler.reef import Reef

    ex, dev, _ = make_device(kind)
    reef = Reef(ex, dev, "reset", be_streams=1)
    reef.add_client("rt", program, "rt")
    times = []
    with reef:
        for _ in range(warmup + reps):
            r = reef.submit("rt", inputs).result()
            times.append(r.end_s - r.arrival_s)
    dev.close()
    return statistics.median(times[warmup:])


# ---- load generation ---------------------------------------------------------------------------

class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.rt: list = []  # TaskResult of RT requests that arrived inside the window
        self.be_done: list = []
        self.pending: list = []

    def add(self, priority: str, result) -> None:
        with self.lock:
            (self.rt if priority == "rt" else self.be_done).append(result)


def closed_loop(reef, client, priority, inputs, stop_at, rec: Recorder,
                stop: threading.Event | None = None) -> None:
    clock = reef.clock
    while clock() < stop_at and not (stop is not None and stop.is_set()):
        try:
            rec.add(priority, reef.submit(client, inputs).result())
        except RuntimeError:  # the scheduler stopped under us at the end of the window
            return


def open_loop(reef, client, inputs, rate, poisson, start, stop_at, rng, rec: Recorder) -> None:
    clock = reef.clock
    t = start + rng.uniform(0, 1.0 / rate)  # clients are out of phase with one another
    while t < stop_at:
        delay = t - clock()
        if delay > 0:
            time.sleep(delay)
        rec.pending.append(reef.submit(client, inputs))
        t += rng.exponential(1.0 / rate) if poisson else 1.0 / rate


def percentiles_ms(values_s: list[float]) -> dict:
    import numpy as np

    if not values_s:
        return {"p50": None, "p99": None, "mean": None, "max": None, "n": 0}
    v = np.asarray(values_s) * 1e3
    return {"p50": round(float(np.percentile(v, 50)), 3), "p99": round(float(np.percentile(v, 99)), 3),
            "mean": round(float(v.mean()), 3), "max": round(float(v.max()), 3), "n": int(v.size)}


def run_policy(policy: str, kind: str, workload: Workload, programs: dict, inputs: dict,
               rate: float | None, duration: float, capacity: int | None, seed: int) -> dict:
    import numpy as np

    from scheduler.reef import DEFAULT_CAPACITY, Reef

    ex, dev, _ = make_device(kind)
    be = [] if policy == RT_ONLY else list(programs["be"])
    reef = Reef(ex, dev, "reset" if policy == RT_ONLY else policy,
                capacity=capacity or DEFAULT_CAPACITY, be_streams=max(1, len(be)))
    for name in programs["rt"]:
        reef.add_client(name, programs["rt"][name], "rt")
    for name in be:
        reef.add_client(name, programs["be"][name], "be")
    pad_pairs = reef.prepare_padding()
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
        "padding_variants": pad_pairs,
        "padding_refused": len(dev.padder.refused) if hasattr(dev, "padder") else 0,
        "padding_error": next(iter(dev.padder.errors.values()), None) if hasattr(dev, "padder") else None,
    }


def merge(policy: str, rounds: list[dict]) -> dict:
    """One policy's rounds pooled: latencies concatenated, counts summed over the total time."""
    pooled = {k: sum((r[k] for r in rounds), [] if isinstance(rounds[0][k], list) else 0)
              for k in rounds[0] if not k.startswith("padding_")}
    seconds = pooled["seconds"]
    return {
        "policy": policy,
        "rt_latency_ms": percentiles_ms(pooled["rt_latency_s"]),
        "rt_start_delay_ms": percentiles_ms(pooled["rt_start_delay_s"]),
        "throughput_rps": {"overall": round((pooled["rt_done"] + pooled["be_done"]) / seconds, 3),
                           "be": round(pooled["be_done"] / seconds, 3),
                           "rt": round(pooled["rt_done"] / seconds, 3)},
        "be_preemptions": pooled["be_preemptions"],
        "be_reruns": pooled["be_reruns"],
        "padded_kernels": pooled["padded_kernels"],
        "padding_variants": rounds[-1]["padding_variants"],
        "padding_refused": rounds[-1]["padding_refused"],
        "padding_error": rounds[-1]["padding_error"],
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


def plot_cdf(latencies: dict[str, list[float]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for policy, lat in latencies.items():
        if lat:
            v = np.sort(np.asarray(lat) * 1e3)
            ax.plot(v, np.arange(1, v.size + 1) / v.size, label=policy)
    ax.set_xlabel("RT latency (ms)")
    ax.set_ylabel("CDF")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def pin_cpu_vgpu(cores: int) -> list[int]:
    """Give the CPU vGPU `cores` cores, as a MIG slice owns its SMs: every thread started from
    here on inherits the affinity, so RT and BE streams compete for the same cores as RT and BE
    kernels compete for SMs."""
    available = sorted(os.sched_getaffinity(0))
    if not 1 <= cores <= len(available):
        raise SystemExit(f"atoll bench: --cpu-cores must be between 1 and {len(available)}")
    chosen = available[-cores:]
    os.sched_setaffinity(0, chosen)
    return chosen


def run(args) -> int:
    from tqdm import tqdm

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
