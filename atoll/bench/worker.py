"""`atoll bench worker`: RT latency through the serving path's vGPU worker while BE batches run.

What `atoll serve` does with a priority-1 request, minus HTTP and preprocessing: a client thread
keeps one vGPU worker busy with BE batches (closed loop, `--be-batch` rows each), and RT batches of
one row arrive one at a time, each a random while (up to one BE batch's duration) after the previous
one ended, so most find a BE batch running. Each batch's rows lie in slots, as the server's do
(`slot_runs.BatchRows`); RT latency is submit to outputs back in this process (slots and the
worker's pipe included). `rt-only` is the same RT arrivals on an idle worker. Each policy gets a
fresh worker process (`scheduler.vgpu_engine`); the executor is numpy on CPU vGPUs and cupy on
GPUs, the ones REEF can preempt.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import onnx
from gpu_runtime.executors import preemptible_executor
from gpu_runtime.vgpu.discovery import discover_vgpus
from gpu_runtime.vgpu.messages import BatchSpec
from gpu_runtime.vgpu.pool import WorkerPool
from scheduler.vgpu_engine import engine_for
from tqdm import tqdm

from atoll.bench.harness import (
    IMAGE_SIZE_CPU,
    POLICY_ORDER,
    RT_ONLY,
    emit,
    make_device,
    percentiles,
    plot_cdf,
    policies_from,
    zoo_model,
)
from atoll.bench.slot_runs import BatchRows

MODELS = {"rt": "mobilenet_v3_small", "be": "squeezenet1_1"}
DEFAULTS = {"cpu": {"n": 40, "be_batch": 8}, "cuda": {"n": 300, "be_batch": 64}}


def register(subparsers) -> None:
    p = subparsers.add_parser("worker", help="RT latency through a vGPU worker process under BE load")
    p.add_argument("--policy", default=None, help=f"comma-separated, from {', '.join((RT_ONLY,) + POLICY_ORDER)} (default: all)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--n", type=int, default=None, help="RT requests per policy (cpu 40, cuda 300)")
    p.add_argument("--be-batch", type=int, default=None, help="rows per BE batch (cpu 8, cuda 64)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the results JSON on stdout")
    p.add_argument("--out", type=Path, default=None,
                   help="results file (default bench/results/worker_<device>.json)")
    p.add_argument("--plot", type=Path, default=None, help="PNG: RT latency CDF per policy")
    p.set_defaults(func=run)


def write_models(device: str, folder: Path, seed: int) -> dict[str, str]:
    """The zoo models as ONNX files, sized for the device as `bench disb` sizes them."""

    paths = {}
    for role, name in MODELS.items():
        paths[role] = str(folder / f"{role}.onnx")
        onnx.save(zoo_model(name, device, seed + (role == "be")), paths[role])
    return paths


def measure(policy: str, device: str, paths: dict, n: int, be_batch: int, seed: int) -> tuple[dict, list]:
    vgpus = discover_vgpus("cpu", cpu_vgpus=1) if device == "cpu" else discover_vgpus("gpu")[:1]
    executor = preemptible_executor(gpu=device != "cpu")
    rng = np.random.default_rng(seed)
    size = IMAGE_SIZE_CPU if device == "cpu" else 224
    rt_x = rng.standard_normal((1, 3, size, size)).astype(np.float32)
    be_x = rng.standard_normal((be_batch, 3, size, size)).astype(np.float32)
    engine = engine_for("reset" if policy == RT_ONLY else policy)
    with WorkerPool(vgpus, executor=executor, engine=engine) as pool, contextlib.ExitStack() as arenas:
        vgpu = vgpus[0].id
        spec = BatchSpec("input", (3, size, size), {})
        batches = {}
        for name, x in (("rt", rt_x), ("be", be_x)):
            described = pool.load_model(name, paths[name], max_batch=len(x), batch=spec)[vgpu]
            batches[name] = arenas.enter_context(contextlib.closing(
                BatchRows(pool, vgpu, name, spec, len(x), x[0].nbytes, described["out_row_bytes"])))  # fmt: skip
            batches[name].write({"input": x})
        rt, be = batches["rt"], batches["be"]
        start = time.perf_counter()
        be.run()  # warm: also times one BE batch alone
        be_alone_s = time.perf_counter() - start
        for _ in range(3):
            rt.run(priority="rt")
        stop, be_done = threading.Event(), []

        def be_loop() -> None:
            while not stop.is_set():
                be.run()
                be_done.append(time.perf_counter())

        loader = threading.Thread(target=be_loop, daemon=True)
        if policy != RT_ONLY:
            loader.start()
        latencies, begin = [], time.perf_counter()
        for _ in range(n):
            time.sleep(float(rng.uniform(0, be_alone_s)))
            t0 = time.perf_counter()
            rt.run(priority="rt")
            latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - begin
        stop.set()
        if policy != RT_ONLY:
            loader.join()
    be_rows = sum(t <= begin + elapsed for t in be_done) * be_batch
    return {
        "policy": policy,
        "rt_latency_ms": percentiles(latencies, digits=2),
        "be_rows_per_s": round(be_rows / elapsed, 2),
        "be_batch_alone_ms": round(be_alone_s * 1e3, 1),
    }, latencies


def run(args) -> int:
    policies = policies_from(args.policy)
    n = args.n or DEFAULTS[args.device]["n"]
    be_batch = args.be_batch or DEFAULTS[args.device]["be_batch"]
    _, dev, description = make_device(args.device)  # also refuses cuda where there is none
    dev.close()
    results, latencies = [], {}
    with tempfile.TemporaryDirectory() as folder:
        paths = write_models(args.device, Path(folder), args.seed)
        for policy in tqdm(policies, desc="worker", unit="policy", file=sys.stderr):
            r, lat = measure(policy, args.device, paths, n, be_batch, args.seed)
            results.append(r)
            latencies[policy] = lat
    out = {"device": f"{description}, one vGPU worker process", "models": MODELS,
           "be_batch": be_batch, "rt_requests_per_policy": n, "results": results}  # fmt: skip
    if args.plot:
        plot_cdf(latencies, f"RT latency through a vGPU worker, {description}", args.plot)
    emit(out, Path(args.out or Path("bench/results") / f"worker_{args.device}.json"), args.json, [
        f"{r['policy']:>8}: RT p50 {r['rt_latency_ms']['p50']} ms  p99 {r['rt_latency_ms']['p99']} ms"
        f"  max {r['rt_latency_ms']['max']} ms  BE {r['be_rows_per_s']} rows/s"
        for r in results])
    return 0
