"""`atoll bench preprocess`: preprocessing throughput and latency per backend, side by side.

image: generated photo-sized JPEGs (500x375 .. 4000x3000) through cpu with 1 worker, cpu with every
core, and the emulated DPU's image CUs. audio: 2.5-25 s clips through the same, plus PREBA's
mel -> norm overlap (fused, one request after another, against 1+1 and 2+2 emulated CUs). Throughput
keeps 2 x parallelism requests in flight until every unit has had at least 8 (fewer would measure
the slowest request); latencies are submit-to-result (p50/p99); `unloaded_ms` is the median of the
first requests, sent one at a time. Beside the emulated DPU's image rate, `modelled_card`: what a
card's CUs would do with the same runs, from the hardware cycles the emulated XRT models for each
(fpga_host.dpu_cycles).
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import json
import os
import platform
import sys
import time
from pathlib import Path

from fpga_host import dpu_cycles
from fpga_host.backends import BACKENDS, CPU_PATH
from fpga_host.preprocessor import Preprocessor
from tqdm import tqdm

from atoll.bench.corpus import CLIP_SECONDS, IMAGE_SIZES, jpeg_bytes, tone
from atoll.bench.cpustat import CpuMeter
from atoll.bench.harness import percentiles

DPU_BACKENDS = tuple(name for name, backend in BACKENDS.items() if backend.open is not None)
# What runs on any machine: the CPU path and the DPU backends `auto` never picks (the emulation).
ANYWHERE = (CPU_PATH, *(name for name in DPU_BACKENDS if not BACKENDS[name].auto))

DEFAULT_N = {"image": 24, "audio": 16}
MIN_PER_WORKER = 8
AUDIO_KERNELS = ("audio_mel_cu", "audio_norm_cu")


def register(subparsers) -> None:
    parser = subparsers.add_parser("preprocess", help="DPU/emulated/CPU preprocessing throughput")
    parser.add_argument("--modality", choices=("image", "audio"), required=True)
    parser.add_argument("--backends", default=",".join(ANYWHERE),
                        help="comma-separated subset of cpu,emu,xrt (default cpu,emu)")
    parser.add_argument("--n", type=int, default=None, help="requests per configuration")
    parser.add_argument("--cus", type=int, default=None,
                        help="image CUs (or mel and norm CUs each) for emu/xrt (default: all in the manifest)")
    parser.add_argument("--json", action="store_true", help="print the results JSON on stdout")
    parser.add_argument("--out", type=Path, default=None,
                        help="results file (default bench/results/preprocess_<modality>.json)")
    parser.add_argument("--plot", type=Path, default=None, help="PNG bar chart of throughput")
    parser.set_defaults(func=run)


def measure(pre, requests: list, label: str, unloaded: int = 6) -> dict:
    """Throughput and latency of `requests` (callables pre -> Future[Result]) on one Preprocessor."""


    cf.wait(pre.warming())  # every CPU worker started: its start-up is not preprocessing time
    for request in requests[:max(1, min(pre.parallelism, len(requests)))]:
        request(pre).result()  # warm-up: caches, first-call compilation, buffer growth
    requests = list(itertools.islice(itertools.cycle(requests),
                                     max(len(requests), MIN_PER_WORKER * pre.parallelism)))
    results = []
    window = 2 * pre.parallelism
    pending: set = set()
    # this process and its workers: a worker's threads may burn cores its throughput never shows,
    # and other tenants of the machine (`other`) may take cores it could have used
    meter = CpuMeter({"preprocessing": [os.getpid()]})
    meter.start()
    start = time.perf_counter()
    with tqdm(total=len(requests), desc=label, unit="req", file=sys.stderr, disable=None) as bar:
        for request in requests:
            pending.add(request(pre))
            if len(pending) >= window:
                done, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                results += [f.result() for f in done]
                bar.update(len(done))
        results += [f.result() for f in pending]
        bar.update(len(pending))
    wall = time.perf_counter() - start
    cores = meter.stop()
    single = [request(pre).result().timings["total_ms"] for request in requests[:unloaded]]
    latencies = [r.timings["total_ms"] for r in results]
    return {"throughput_per_s": round(len(requests) / wall, 3), "wall_s": round(wall, 3),
            "latency_ms": percentiles([v / 1e3 for v in latencies]),
            "unloaded_ms": percentiles([v / 1e3 for v in single])["p50"], "unloaded_each_ms": [round(x, 3) for x in single],
            "n": len(requests), "cores": cores,
            "throughput_per_core": round(len(requests) / wall / cores["preprocessing"], 3) if cores["preprocessing"] else None,
            "cpu_fallbacks": sum(r.backend != pre.backend for r in results)}


def modelled_card(state: dict) -> dict | None:
    """A card's image rate for the runs the emulated XRT modelled (None where it modelled none)."""
    modelled = state.get("modelled_cycles", {}).get("image_cu")
    if not modelled or not modelled["runs"]:
        return None
    model = dpu_cycles.load()
    per_image = modelled["cycles"] / modelled["runs"]
    cus = sum(name.startswith("image_cu") for name in state["cus"])
    return {"runs": modelled["runs"], "cycles_per_image": round(per_image), "clock_mhz": model.clock_hz / 1e6,
            "ms_per_image": round(model.seconds(per_image) * 1e3, 3), "cus": cus,
            "images_per_s_per_cu": round(model.clock_hz / per_image, 1),
            "images_per_s": round(cus * model.clock_hz / per_image, 1)}


def configurations(modality: str, backends: list[str], cus: int | None) -> list[tuple[str, dict]]:
    cores = os.cpu_count() or 1
    counts = ({"image_cus": cus, "audio_mel_cus": 0, "audio_norm_cus": 0} if modality == "image"
              else {"image_cus": 0, "audio_mel_cus": cus, "audio_norm_cus": cus})
    configs = []
    if CPU_PATH in backends:
        configs += [(f"{CPU_PATH}-1", {"backend": CPU_PATH, "cpu_workers": 1}),
                    (f"{CPU_PATH}-{cores}", {"backend": CPU_PATH, "cpu_workers": cores})]
    for backend in DPU_BACKENDS:
        if backend in backends:
            configs.append((backend, {"backend": backend, "cpu_workers": 1, **counts}))
    return configs


def image_requests(n: int, stage: str = "normalize") -> tuple[list, dict]:
    files = [jpeg_bytes(*IMAGE_SIZES[i % len(IMAGE_SIZES)], seed=i) for i in range(n)]
    sizes = [IMAGE_SIZES[i % len(IMAGE_SIZES)] for i in range(n)]
    corpus = {"sizes": {f"{w}x{h}": sizes.count((w, h)) for w, h in dict.fromkeys(sizes)},
              "mean_kib": round(sum(map(len, files)) / len(files) / 1024, 1)}
    return [lambda pre, data=data: pre.submit_image(data, stage) for data in files], corpus


def audio_clips(n: int) -> list[tuple]:
    rates = (16000, 44100, 22050, 48000)
    return [(tone(CLIP_SECONDS[i % 4], rates[i % 4], seed=i), rates[i % 4]) for i in range(n)]


def audio_requests(clips: list[tuple]) -> list:
    return [lambda pre, pcm=pcm, rate=rate: pre.submit_audio(pcm, rate) for pcm, rate in clips]


def mel_norm_overlap(clips: list[tuple], backend: str) -> dict:
    """Wall time of the same requests: serial fused mel+norm vs pipelined over 1+1 and 2+2 CUs."""

    results = {}
    with Preprocessor(backend, cpu_workers=0, image_cus=0, audio_mel_cus=1, audio_norm_cus=1) as pre:
        _require_cus(pre, AUDIO_KERNELS)
        pre.submit_audio(*clips[0]).result()
        start = time.perf_counter()
        for pcm, rate in clips:  # one request at a time: mel then norm, nothing overlaps
            pre.submit_audio(pcm, rate).result()
        results["serial_fused_s"] = time.perf_counter() - start
    for mel, norm in ((1, 1), (2, 2)):
        with Preprocessor(backend, cpu_workers=0, image_cus=0, audio_mel_cus=mel,
                          audio_norm_cus=norm) as pre:
            pre.submit_audio(*clips[0]).result()
            start = time.perf_counter()
            futures = [pre.submit_audio(pcm, rate) for pcm, rate in clips]
            backends = {f.result().backend for f in futures}
            results[f"pipelined_{mel}mel_{norm}norm_s"] = time.perf_counter() - start
            if backends != {backend}:
                raise RuntimeError(f"some requests fell back to the CPU: {backends}")
    results = {k: round(v, 3) for k, v in results.items()}
    for key in ("pipelined_1mel_1norm_s", "pipelined_2mel_2norm_s"):
        results[key.replace("_s", "_speedup")] = round(results["serial_fused_s"] / results[key], 3)
    results["n"] = len(clips)
    return results


def _require_cus(pre, kernels: tuple[str, ...]) -> None:
    """A DPU configuration without the CUs it is meant to measure is reported unavailable."""
    unopened = pre.describe()["unopened"]
    missing = [unopened[k] for k in kernels if k in unopened]
    if missing:
        raise RuntimeError("; ".join(missing))


def run(args) -> int:
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        print(f"atoll bench preprocess: error: unknown backend(s) {sorted(unknown)}", file=sys.stderr)
        return 2
    n = args.n or DEFAULT_N[args.modality]
    if args.modality == "image":
        requests, corpus = image_requests(n)
    else:
        clips = audio_clips(n)
        requests = audio_requests(clips)
        corpus = {"seconds": sorted({round(p.size / r, 2) for p, r in clips}),
                  "rates": sorted({r for _, r in clips})}
    report = {"bench": "preprocess", "modality": args.modality, "n": n, "corpus": corpus,
              "host": {"cores": os.cpu_count(), "machine": platform.machine(),
                       "python": platform.python_version(),
                       "load_avg_1min_at_start": round(os.getloadavg()[0], 2)},
              "configs": {}}
    for label, options in configurations(args.modality, backends, args.cus):
        try:
            with Preprocessor(**options) as pre:
                _require_cus(pre, ("image_cu",) if args.modality == "image" else AUDIO_KERNELS)
                row = measure(pre, requests, label)
                state = pre.describe()
                row.update(backend=pre.backend, parallelism=pre.parallelism)
                if state["cus"]:
                    row["cus"] = state["cus"]
                if card := modelled_card(state):
                    row["modelled_card"] = card
        except Exception as exc:  # a backend this machine lacks is reported, not fatal
            row = {"unavailable": f"{type(exc).__name__}: {exc}".splitlines()[0]}
        report["configs"][label] = row
    dpus = [b for b in backends if b in DPU_BACKENDS]
    if args.modality == "audio" and dpus:
        try:
            report["mel_norm_overlap"] = mel_norm_overlap(clips, dpus[0])
        except Exception as exc:
            report["mel_norm_overlap"] = {"unavailable": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    out = args.out or Path("bench/results") / f"preprocess_{args.modality}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    if args.plot:
        plot(report, args.plot)
    if args.json:
        print(json.dumps(report))
    else:
        for label, row in report["configs"].items():
            if "unavailable" in row:
                print(f"{label:>8}: unavailable ({row['unavailable']})", file=sys.stderr)
            else:
                print(f"{label:>8}: {row['throughput_per_s']:8.2f} /s  p50 {row['latency_ms']['p50']} ms"
                      f"  p99 {row['latency_ms']['p99']} ms  unloaded {row['unloaded_ms']} ms  cores used "
                      f"{row['cores']['preprocessing']} (others on the machine {row['cores']['other']})",
                      file=sys.stderr)
                if card := row.get("modelled_card"):
                    print(f"{'':>8}  a card (modelled): {card['images_per_s']:8.2f} /s on {card['cus']} CUs at "
                          f"{card['clock_mhz']:g} MHz, {card['ms_per_image']} ms an image", file=sys.stderr)
        print(f"results written to {out}", file=sys.stderr)
    return 0


def plot(report: dict, path: Path) -> None:
    import matplotlib  # heavy: only --plot draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy: only --plot draws

    rows = {k: v for k, v in report["configs"].items() if "throughput_per_s" in v}
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(list(rows), [r["throughput_per_s"] for r in rows.values()], color="#4477aa")
    unit = "images" if report["modality"] == "image" else "clips"
    ax.set_ylabel(f"{unit}/s")
    ax.set_title(f"preprocess {report['modality']} throughput ({report['host']['cores']} cores)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
