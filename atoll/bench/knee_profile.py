"""Profiles measured on a vGPU (`atoll profile`): tail latency and the worker's CPU time per input,
per batch size and input length, through the real worker path, optionally at load (other cores
busy with the CPU path's JPEG preprocessing), with Batch_max / Time_knee per bucket by a
batching.knee rule: the latency knee on GPUs, the per-input cost floor on CPU vGPUs, whose latency
grows with the batch from the start. What "at load" means: docs/batching-scheduling.md."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from batching.knee import COST_FLOOR, KNEE, batch_max
from batching.profile import BucketProfile, ModelProfile, Profile, load_profile, save_profile
from fpga_host.cpu_backend import CpuPool, ImageParams
from gpu_runtime.executors import resolve_executor
from gpu_runtime.vgpu.discovery import discover
from gpu_runtime.vgpu.pool import WorkerPool
from tqdm import tqdm

from atoll.bench.corpus import JPEG_SETS, jpeg_bytes
from atoll.bench.cpustat import machine_busy_s
from atoll.bench.slot_runs import SlotRunner, load_for_rows
from atoll.repository.demo import demo_repository
from atoll.repository.specs import load_repository

Runner = Callable[[int, float], None]  # run one batch of `batch` inputs of `length` seconds


def measure(runner: Runner, model: str, modality: str, lengths: Sequence[float],
            batches: Sequence[int], repeats: int, warmup: int, percentile: float,
            clock: Callable[[], float] = time.perf_counter, progress: bool = True,
            cpu_clock: Callable[[], float] | None = None, rule: str = KNEE) -> ModelProfile:
    """A ModelProfile of tail latency (ms) per (length, batch) and, with `cpu_clock` (CPU seconds of
    whatever runs the batches), the median CPU ms per input; Batch_max per bucket by `rule`."""
    if rule == COST_FLOOR and cpu_clock is None:
        raise ValueError(f"the {COST_FLOOR} rule needs a CPU clock")
    points = [None] if modality == "image" else list(lengths)
    buckets = []
    with tqdm(total=len(points) * repeats, desc=f"profile {model}", unit="round",
              file=sys.stderr, disable=not progress) as bar:
        for length in points:
            seconds = 1.0 if length is None else length
            for batch in batches:
                for _ in range(warmup):
                    runner(batch, seconds)
            times = {batch: [] for batch in batches}
            cpu_times = {batch: [] for batch in batches}
            for _ in range(repeats):
                # a round of every size, so that a burst of other work falls on all sizes alike
                for batch in batches:
                    cpu_start = cpu_clock() if cpu_clock else 0.0
                    start = clock()
                    runner(batch, seconds)
                    times[batch].append((clock() - start) * 1e3)
                    if cpu_clock:
                        cpu_times[batch].append((cpu_clock() - cpu_start) * 1e3 / batch)
                bar.update()
            latency = {batch: float(np.percentile(times[batch], percentile)) for batch in batches}
            cpu = {batch: statistics.median(cpu_times[batch]) for batch in batches} if cpu_clock else {}
            size, time_knee = batch_max(rule, latency, cpu or None)
            buckets.append(BucketProfile(length, size, time_knee, latency, cpu or None))
    return ModelProfile(modality, tuple(buckets), rule)


def worker_cpu_s(pid: int) -> float:
    """CPU seconds of a live process's threads, to the nanosecond (the scheduler's run time of each
    thread, /proc/PID/task/TID/schedstat), where /proc/PID/stat counts 10 ms ticks."""
    total = 0
    task_dir = Path(f"/proc/{pid}/task")
    for task in task_dir.iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):  # the thread ended meanwhile
            continue
    return total / 1e9


def default_load(kind: str) -> int:
    """Preprocessing processes beside a CPU vGPU's worker: one per core but one, as a served box
    runs its JPEG work on the cores around the executor's; none beside a GPU's."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(0, cores - 1) if kind == "cpu" else 0


class PreprocessingLoad:
    """`processes` CPU-path preprocessing processes (fpga_host.cpu_backend.CpuPool), each decoding,
    resizing, cropping and normalising web-sized JPEGs back to back (two queued per process) from
    `with` to its end; `rate()` is the images a second they got through."""

    def __init__(self, processes: int):
        self.processes = processes
        self.images = [jpeg_bytes(w, h, seed=i) for i, (w, h) in enumerate(JPEG_SETS["web"])]
        self.done = 0
        self._next = itertools.count()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._pool: CpuPool | None = None

    def __enter__(self) -> PreprocessingLoad:
        if self.processes:
            self._pool = CpuPool(self.processes)
            for started in self._pool.warming:
                started.result()
            self._since = time.monotonic()
            for _ in range(2 * self.processes):
                self._feed()
        return self

    def _feed(self, finished=None) -> None:
        if finished is not None:
            with self._lock:
                self.done += 1
        if not self._stop.is_set():
            data = self.images[next(self._next) % len(self.images)]
            self._pool.image(data, "normalize", ImageParams()).add_done_callback(self._feed)

    def rate(self) -> float:
        return self.done / (time.monotonic() - self._since) if self.processes else 0.0

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._pool is not None:
            self._pool.close()


def profile_on_vgpu(args: argparse.Namespace, batches: list[int], lengths: list[float]) -> None:
    spec = _model_spec(args.repository, args.model)
    modality = "audio" if spec.preprocess == "audio" else "image"
    vgpus = discover(args.vgpu_mode).vgpus
    info = next((v for v in vgpus if v.id == args.vgpu), None) if args.vgpu else vgpus[0]
    if info is None:
        raise ValueError(f"no vGPU {args.vgpu!r}; found {', '.join(v.id for v in vgpus)}")
    if spec.max_batch_size and batches[-1] > spec.max_batch_size:
        raise ValueError(f"{spec.name} accepts batches up to {spec.max_batch_size} (config.pbtxt)")
    load = default_load(info.kind) if args.load is None else args.load
    rule = COST_FLOOR if info.kind == "cpu" else KNEE

    with WorkerPool([info], executor=resolve_executor(args.executor, [info])) as pool:
        seconds = lengths if modality == "audio" else []
        out_row_bytes = load_for_rows(pool, spec, batches[-1], seconds)
        runner = SlotRunner(pool, info.id, spec, batches[-1], seconds, out_row_bytes)
        with PreprocessingLoad(load) as background, contextlib.closing(runner):
            busy, wall = machine_busy_s(), time.monotonic()
            measured = measure(runner, spec.name, modality, lengths, batches, args.repeats, args.warmup,
                               args.percentile, cpu_clock=lambda: worker_cpu_s(pool.workers[info.id].pid),
                               rule=rule)  # fmt: skip
            cores_busy = (machine_busy_s() - busy) / (time.monotonic() - wall)
            images_per_s = background.rate()

    cores = os.cpu_count()
    source = (f"measured by `atoll profile` on {platform.node()} ({cores} cores), "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {info.name} vGPU {info.id} "
              f"(cores {','.join(map(str, info.cpus)) or 'all'}), executor {pool.executor}; "
              f"p{args.percentile:g} latency of {args.repeats} batches per point, CPU ms per input "
              f"= the worker process's CPU time per batch / batch size, median; at load: {load} "
              f"JPEG preprocessing process(es) beside it ({images_per_s:.0f} images/s); the machine "
              f"(other tenants included) {cores_busy:.2f} of {cores} cores busy on average")
    measured = ModelProfile(measured.modality, measured.buckets, measured.rule, source)
    out = Path(args.out)
    models = {}
    if out.is_file():
        previous = load_profile(out)
        if previous.kind != info.profile_kind:
            raise ValueError(f"{out} holds a profile for {previous.kind!r}, this vGPU is "
                             f"{info.profile_kind!r}: choose another --out")
        models = dict(previous.models)
    models[spec.name] = measured
    summary = (f"measured by `atoll profile` on {info.profile_kind} vGPUs; each model's source "
               f"says where, when and at what load")
    save_profile(Profile(info.profile_kind, summary, models, args.percentile), out)
    print(f"wrote {out}: {spec.name} on {info.profile_kind}, Batch_max ({rule}) per bucket "
          f"{[b.batch_knee for b in measured.buckets]}", file=sys.stderr)
    if args.plot:
        plot(spec.name, measured, args.percentile, args.plot)


def plot(model: str, measured: ModelProfile, percentile: float, path: str) -> None:
    """Per-input CPU cost and tail latency against batch size, a line per bucket, Batch_max marked."""
    import matplotlib  # heavy: only --plot draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy: only --plot draws
    from matplotlib import ticker  # heavy: only --plot draws

    fig, (cost_ax, latency_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for bucket in measured.buckets:
        label = "image" if bucket.length_s is None else f"{bucket.length_s:g} s"
        for ax, values in ((cost_ax, bucket.cpu_ms_per_input), (latency_ax, bucket.latency_ms)):
            if values is None:
                continue
            sizes = sorted(values)
            (line,) = ax.plot(sizes, [values[s] for s in sizes], marker="o", label=label)
            ax.plot([bucket.batch_knee], [values[bucket.batch_knee]], marker="*", markersize=14,
                    color=line.get_color())  # fmt: skip
    sizes = measured.batch_sizes()
    for ax, what in ((cost_ax, "worker CPU ms per input"), (latency_ax, f"p{percentile:g} batch latency (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ticker.ScalarFormatter())
        ax.yaxis.set_minor_formatter(ticker.ScalarFormatter())
        ax.set_xlabel("batch size")
        ax.set_ylabel(what)
        ax.legend(fontsize="small", ncol=2)
    fig.suptitle(f"{model}: Batch_max ({measured.rule}) starred")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _model_spec(repository: str | None, model: str):
    if repository is None:
        repository = demo_repository()
    models = load_repository(repository)
    if model not in models:
        raise ValueError(f"no model {model!r} in {repository} (has {', '.join(models)})")
    return models[model]
