"""What every `atoll bench` shares: where results go, percentiles, plots, random inputs, the zoo
models and scheduler devices the scheduling benchmarks run on, and their load generators."""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from pathlib import Path

import numpy as np

from gpu_runtime import zoo
from gpu_runtime.compiler.importer import import_model
from gpu_runtime.executors import preemptible_executor, program_executor
from scheduler.cpu_device import CpuDevice
from scheduler.cuda_device import CudaDevice
from scheduler.reef import Reef

RT_ONLY = "rt-only"
POLICY_ORDER = ("seq", "streams", "wait", "reset", "reef")
IMAGE_SIZE_CPU = 112
FIXED_SIZE = {"swin_t"}  # its window partition is built for 224x224
AUDIO_FRAMES = {"cpu": 64, "cuda": 300}


# ---- results -----------------------------------------------------------------------------------

def emit(doc: dict, path: Path, as_json: bool, summary: list[str]) -> None:
    """A JSON file always; stdout as JSON or as summary lines."""
    text = json.dumps(doc, indent=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    if as_json:
        print(text)
    else:
        print("\n".join([*summary, f"wrote {path}"]))


def percentiles(values_s, unit: str = "ms", qs=(50, 99), digits: int = 3) -> dict:
    """p<q> for each q, mean, max and n of durations given in seconds, in `unit` (s, ms or us)."""

    keys = [f"p{q}" for q in qs]
    if len(values_s) == 0:
        return {**dict.fromkeys(keys), "mean": None, "max": None, "n": 0}
    v = np.asarray(values_s, dtype=np.float64) * {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    out = {k: round(float(np.percentile(v, q)), digits) for k, q in zip(keys, qs)}
    return {**out, "mean": round(float(v.mean()), digits), "max": round(float(v.max()), digits),
            "n": int(v.size)}


def plot_cdf(latencies: dict[str, list[float]], title: str, path: Path,
             xlabel: str = "RT latency (ms)") -> None:
    """One CDF curve per key (latencies in seconds, plotted in ms)."""
    import matplotlib  # heavy: only --plot draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy: only --plot draws

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for policy, lat in latencies.items():
        if lat:
            v = np.sort(np.asarray(lat) * 1e3)
            ax.plot(v, np.arange(1, v.size + 1) / v.size, label=policy)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("CDF")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def random_inputs(program, seed: int) -> dict:
    """Standard-normal float32 inputs for every graph input of a kernel program."""

    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(program.buffers[i].shape).astype(np.float32)
            for name, i in program.inputs.items()}


# ---- policies, models and devices ----------------------------------------------------------------

def policies_from(arg: str | None) -> list[str]:
    """The policies a `--policy` argument names (comma-separated; None: all, side by side)."""
    if arg is None:
        return [RT_ONLY, *POLICY_ORDER]
    names = [a.strip() for a in arg.split(",") if a.strip()]
    unknown = [n for n in names if n not in (RT_ONLY, *POLICY_ORDER)]
    if unknown or not names:
        raise SystemExit(f"atoll bench: unknown policy {', '.join(unknown) or arg!r}; "
                         f"choose from {', '.join((RT_ONLY,) + POLICY_ORDER)}")
    return names


def zoo_model(name: str, device: str, seed: int):
    """A zoo model as ONNX; on CPU vGPUs image models get smaller inputs (the graphs are
    resolution-free up to their global pooling)."""

    model = zoo.build(name, seed=seed)
    if zoo.MODELS[name].kind == "image" and device == "cpu" and name not in FIXED_SIZE:
        dims = model.graph.input[0].type.tensor_type.shape.dim
        dims[2].dim_value = dims[3].dim_value = IMAGE_SIZE_CPU
    return model


def load_program(name: str, device: str, seed: int, batch: int = 1):
    """Import a zoo model (`zoo_model`) at `batch`, audio at the device's AUDIO_FRAMES; the
    program is named `<model>[-b<batch>]-<seed>`."""

    model = zoo_model(name, device, seed)
    length = None if zoo.MODELS[name].kind == "image" else AUDIO_FRAMES[device]
    size = f"-b{batch}" if batch > 1 else ""
    return import_model(model, batch=batch, length=length, name=f"{name}{size}-{seed}")


def make_device(kind: str, measure_start: bool = False, os_priorities: bool = False):
    """(executor, scheduler device, description) for a vGPU of this kind; `measure_start`: RT
    tasks learn when their first kernel got the GPU (the arriving thread waits for it);
    `os_priorities`: a CPU vGPU's RT stream and scheduler loop at SCHED_FIFO (scheduler/cpu_device.py)."""
    if kind == "cpu":
        # One BLAS thread per stream thread: a stream is the CPU's unit of parallelism, and
        # nested BLAS pools would oversubscribe the cores whenever two streams run.
        ex = program_executor(preemptible_executor(gpu=False))(blas_threads=1)
        return ex, CpuDevice(ex, os_priorities=os_priorities), f"cpu vGPU ({os.cpu_count()} cores, {ex.name} executor)"
    try:
        ex = program_executor(preemptible_executor(gpu=True))()
        dev = CudaDevice(ex, measure_start=measure_start)
    except Exception as e:  # no cupy, no driver, no device: a user mistake, not a crash
        raise SystemExit(f"atoll bench: --device cuda is unavailable here: {e}") from None
    return ex, dev, dev.description


def solo_latency_s(kind: str, program, inputs, reps: int = 5, warmup: int = 2) -> float:
    """Median end-to-end time of one request alone (used to scale rates to what the device does)."""

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
