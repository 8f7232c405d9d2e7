"""A served model's WCETs for the real-time admission test, through the real worker path of one vGPU
(`atoll rt profile`; rows in a slot arena, run as the server runs them: `slot_runs`): real-time
batches alone, then beside a best-effort closed loop of the same model (the blocking), and, for
image models, the CPU path's preprocessing of a web-sized JPEG. The
pacing and thread priorities are rt_wcet's."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time

import numpy as np
from fpga_host.cpu_backend import CpuPool, ImageParams
from gpu_runtime.priority import Priority
from scheduler.rt_profile import ModelWcet

from atoll.bench.corpus import JPEG_SETS, jpeg_bytes
from atoll.bench.rt_wcet import StallProbe, on_thread
from atoll.bench.slot_runs import BatchRows, load_for_rows
from atoll.supervisor.model_batching import batch_spec


def on_worker(pool, vgpu_id: str, spec, batches: list[int], runs: int, margin: float, probes: int,
              probe: StallProbe, rng=None) -> tuple[ModelWcet, float]:
    """A served model's WCETs through the real worker path (loaded here on `pool`, run on `vgpu_id`):
    real-time batches alone, then batch-1 probes while a best-effort closed loop of the same model
    keeps the vGPU busy; returns its ModelWcet and the blocking seen (margin included); `probe`
    runs while they are timed (the platform's stall, a term of its own in the analysis). Image
    models' preprocessing (the CPU path, one web-sized JPEG) is timed too."""
    rng = rng or np.random.default_rng(0)
    tensor = spec.inputs[0]
    if any(d < 0 for d in tensor.dims) or len(spec.inputs) > 1:
        raise ValueError(f"{spec.name}: only models of one fixed-shape input are profiled for real time "
                         "(a variable length's WCET would be its longest bucket's)")  # fmt: skip
    dims = list(tensor.dims)
    out_row_bytes = load_for_rows(pool, spec, max(batches), ())
    in_bytes = 4 * int(np.prod(dims))
    with contextlib.ExitStack() as arenas:  # the RT batches' rows, and the best-effort loop's own
        rt_rows, be_rows = (arenas.enter_context(contextlib.closing(
            BatchRows(pool, vgpu_id, spec.name, batch_spec(spec), count, in_bytes, out_row_bytes)))
            for count in (max(batches), 1))  # fmt: skip
        return _measure(rt_rows, be_rows, spec, batches, runs, margin, probes, probe, rng, tensor.name, dims)


def _measure(rt_rows, be_rows, spec, batches, runs, margin, probes, probe, rng, name, dims) -> tuple[ModelWcet, float]:
    def timed(b, priority=Priority.RT) -> float:
        rows = rt_rows if priority is Priority.RT else be_rows
        rows.write({name: rng.standard_normal((b, *dims)).astype(np.float32)})  # as a front end writes them
        start = time.perf_counter()
        rows.run(priority)
        return time.perf_counter() - start

    def alone() -> dict[int, list[float]]:
        out = {b: [] for b in batches}
        last = 0.0
        for _ in range(runs):
            for b in batches:
                time.sleep(rng.uniform(1.0, 3.0) * last)  # see the module docstring
                last = timed(b)
                out[b].append(last)
        return out

    for b in batches:
        timed(b)  # warm-up
    with probe:
        times = on_thread(Priority.RT, alone)
    stop = threading.Event()

    def best_effort():
        while not stop.is_set():
            timed(1, Priority.BE)

    loop = threading.Thread(target=on_thread, args=(Priority.BE, best_effort))
    loop.start()
    try:
        with probe:
            beside = on_thread(Priority.RT, lambda: [time.sleep(0.002 + rng.uniform(0, 0.01)) or timed(1)
                                                     for _ in range(probes)])  # fmt: skip
    finally:
        stop.set()
        loop.join()
    blocking = max(0.0, max(beside) - statistics.median(times[min(batches)])) * margin
    preprocess = preprocess_s(spec) * margin
    observed = {b: max(v) for b, v in times.items()}
    return ModelWcet({b: v * margin for b, v in observed.items()}, observed, 0.0, preprocess, runs), blocking


def preprocess_s(spec, runs: int = 50) -> float:
    """The longest of `runs` CPU-path preprocessings of a web-sized JPEG (image models; 0 else)."""
    if spec.preprocess != "image":
        return 0.0
    images = [jpeg_bytes(w, h, seed=i) for i, (w, h) in enumerate(JPEG_SETS["web"])]
    pool = CpuPool(1)
    try:
        for started in pool.warming:
            started.result()

        def one(data) -> float:
            start = time.perf_counter()
            pool.image(data, "normalize", ImageParams()).result()
            return time.perf_counter() - start

        return max(one(images[k % len(images)]) for k in range(runs))
    finally:
        pool.close()
