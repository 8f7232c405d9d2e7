"""`atoll bench models`: latency and throughput per model and batch size on one vGPU.

The raw material of knee profiles: each (model, batch[, length]) goes through the real vGPU worker
pool after warm-up, `--repeats` times: round-trip latency and compute time inside the worker
(median, p95), throughput from the median round trip, and optionally the same batch in this process
on another runtime (`--compare`). `--compare torch-graph` is the GPU yardstick: the ONNX graph as a
PyTorch CUDA graph (fp32 without TF32, and fp16) against our cupy program graph in fp32 and fp16,
timed with device events, plus each fp16 output's relative error against PyTorch's fp32.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from gpu_runtime.compiler.importer import import_model
from gpu_runtime.executors import DEFAULT_EXECUTOR, EXECUTORS, preemptible_executor, probe_executors, program_executor
from gpu_runtime.vgpu.discovery import MODES, discover_vgpus
from gpu_runtime.vgpu.messages import BatchSpec
from gpu_runtime.vgpu.pool import WorkerError, WorkerPool
from gpu_runtime.vgpu.slots import row_layout
from gpu_runtime.zoo import MODELS, build
from gpu_runtime.zoo.repository import write_model
from tqdm import tqdm

from atoll import __version__
from atoll.bench.harness import percentiles
from atoll.bench.slot_runs import BatchRows
from atoll.bench.torch_eager import TorchEagerModel, TorchGraphModel
from atoll.repository.specs import DIM_BOUND, load_repository

DEFAULT_BATCHES = "1,2,4,8,16,32,64"
COMPARE = ("onnxruntime-cpu", "onnxruntime-gpu", "torch", "torch-graph")


def register(subparsers) -> None:
    p = subparsers.add_parser("models", help="latency/throughput per model and batch size (knee profiles)")
    p.add_argument("--executor", default=DEFAULT_EXECUTOR, choices=sorted(EXECUTORS), help="vGPU executor")
    p.add_argument("--models", nargs="+", metavar="NAME", help="models to run (default: all)")
    p.add_argument("--repository", help="Triton-layout model repository (default: the zoo, built once into a cache)")
    p.add_argument("--batches", default=DEFAULT_BATCHES, help=f"batch sizes (default {DEFAULT_BATCHES})")
    p.add_argument("--lengths", default="256",
                   help="values for variable non-batch dims, e.g. audio frames (default 256)")
    p.add_argument("--vgpu", help="vGPU id to run on (default: the first discovered)")
    p.add_argument("--vgpu-mode", default=MODES[0], choices=MODES)
    p.add_argument("--repeats", type=int, default=10, help="timed runs per point (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs per point (default 2)")
    p.add_argument("--compare", choices=COMPARE,
                   help="also time the same batches in-process with this runtime, side by side")
    p.add_argument("--json", action="store_true", help="print the JSON document to stdout")
    p.add_argument("--out", help="also write the JSON here (e.g. bench/results/models_cpu.json)")
    p.set_defaults(func=run)


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"atoll bench models: --{what} takes comma-separated integers, got {text!r}")
    if not values or min(values) < 1:
        raise SystemExit(f"atoll bench models: --{what} needs positive integers, got {text!r}")
    return values


def run(args) -> int:
    batches = _ints(args.batches, "batches")
    lengths = _ints(args.lengths, "lengths")
    if args.repeats < 1 or args.warmup < 0:
        print("atoll bench models: --repeats must be >= 1 and --warmup >= 0", file=sys.stderr)
        return 2
    try:
        specs, skipped = _models(args.repository, args.models)
    except (ValueError, KeyError, OSError) as exc:
        print(f"atoll bench models: {exc}", file=sys.stderr)
        return 2
    if not specs:
        print(f"atoll bench models: no model to run ({skipped})", file=sys.stderr)
        return 2
    try:
        doc = bench(specs, batches, lengths, args)
    except (ValueError, KeyError, RuntimeError) as exc:
        print(f"atoll bench models: {exc}", file=sys.stderr)
        return 1
    doc["skipped"] = skipped + doc["skipped"]
    text = json.dumps(doc, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    if args.json:
        print(text)
    else:
        print(_table(doc))
    return 0


def _models(repository: str | None, names: list[str] | None) -> tuple[dict[str, tuple[Path, int]], list]:
    """{model: (onnx path, max batch or 0)} and [{model, reason}] for the ones that cannot run."""
    if repository:
        found = {n: (s.path, s.max_batch_size) for n, s in load_repository(repository).items()}
        unknown = sorted(set(names or ()) - set(found))
        if unknown:
            raise KeyError(f"not in {repository}: {', '.join(unknown)}; have {', '.join(found)}")
        return {n: found[n] for n in (names or found)}, []
    return _zoo(names)


def zoo_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "atoll" / "zoo"


def _zoo(names: list[str] | None) -> tuple[dict[str, tuple[Path, int]], list]:
    """Zoo models built once (seed 0) into the cache; models whose builder fails are skipped."""

    unknown = sorted(set(names or ()) - set(MODELS))
    if unknown:
        raise KeyError(f"unknown zoo model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    specs, skipped = {}, []
    for name in names or MODELS:
        path = zoo_cache() / name / "1" / "model.onnx"
        if not path.is_file():
            try:
                write_model(zoo_cache(), name, build(name, seed=0))
            except Exception as exc:  # a builder not written yet or broken: report, run the rest
                skipped.append({"model": name, "reason": f"zoo build failed: {type(exc).__name__}: {exc}"})
                continue
        specs[name] = (path, MODELS[name].max_batch_size)
    return specs, skipped


def _inputs(path: Path, batch: int, length: int, rng) -> dict:
    """Random inputs for every graph input: dim 0 is the batch, other symbolic dims take `length`."""

    model = onnx.load(str(path), load_external_data=False)
    weights = {i.name for i in model.graph.initializer}
    inputs = {}
    for value in model.graph.input:
        if value.name in weights:
            continue
        tensor = value.type.tensor_type
        shape = [
            batch if axis == 0 else (d.dim_value if d.dim_value > 0 else length)
            for axis, d in enumerate(tensor.shape.dim)
        ]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        if np.issubdtype(dtype, np.floating):
            inputs[value.name] = rng.standard_normal(shape).astype(dtype)
        else:
            inputs[value.name] = rng.integers(0, 2, shape).astype(dtype)
    return inputs


def _row_spec(path: Path, bound: int) -> tuple[BatchSpec, int, int]:
    """The graph's inputs as slot rows (dim 0 the batch, other symbolic dims up to `bound`), and the
    bytes a row of inputs and of outputs (a symbolic dim up to `bound` or DIM_BOUND) takes."""
    model = onnx.load(str(path), load_external_data=False)
    weights = {i.name for i in model.graph.initializer}

    def row(values) -> list:
        return [(v.name, tuple(d.dim_value if d.dim_value > 0 else -1 for d in v.type.tensor_type.shape.dim[1:]),
                 onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type))
                for v in values if v.name not in weights]  # fmt: skip

    fields, in_bytes = row_layout(row(model.graph.input), bound)
    outputs = row(model.graph.output)
    _, out_bytes = row_layout(outputs, max(bound, DIM_BOUND))
    spec = BatchSpec(fields[0].name, fields[0].dims, {name: dims for name, dims, _ in outputs},
                     fields[0].dtype.name, fields)  # fmt: skip
    return spec, in_bytes, out_bytes


def _has_length(path: Path) -> bool:
    model = onnx.load(str(path), load_external_data=False)
    weights = {i.name for i in model.graph.initializer}
    return any(
        d.dim_value <= 0
        for v in model.graph.input
        if v.name not in weights
        for d in list(v.type.tensor_type.shape.dim)[1:]
    )


def _comparator(kind: str | None):
    """(note, make_runner) for --compare: make_runner(path) gives a callable that runs the model on
    an input dict and waits for the device; (note with the reason it was skipped, None) otherwise."""
    if kind is None:
        return None, None
    if kind in ("torch", "torch-graph"):
        try:
            import torch  # optional: PyTorch, the GPU baseline only
        except ImportError as exc:
            return {"kind": kind, "skipped": f"PyTorch not importable ({exc})"}, None
        if not torch.cuda.is_available():
            return {"kind": kind, "skipped": "PyTorch sees no CUDA device"}, None

        if kind == "torch-graph":
            return {"kind": kind, "runtime": f"torch {torch.__version__} CUDA graph vs atoll graph, "
                    "fp32 (TF32 off) and fp16, GPU time", "device": torch.cuda.get_device_name()}, graph_runner

        def make_torch(path):
            model = TorchEagerModel(str(path), "cuda")
            return lambda inputs: (model(inputs), model.synchronize())

        return {"kind": kind, "runtime": f"torch {torch.__version__} eager (ONNX graph op by op)",
                "device": torch.cuda.get_device_name()}, make_torch  # fmt: skip

    if kind == "onnxruntime-cpu":
        providers = ["CPUExecutionProvider"]
    elif "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        return {"kind": kind, "skipped": "this onnxruntime has no CUDAExecutionProvider"}, None
    else:
        providers = ["CUDAExecutionProvider"]

    def make_ort(path):
        session = onnxruntime.InferenceSession(str(path), providers=providers)
        names = [o.name for o in session.get_outputs()]
        return lambda inputs: session.run(names, inputs)

    note = {"kind": kind, "runtime": f"onnxruntime {onnxruntime.__version__}", "providers": providers}
    return note, make_ort


def _event_ms(replay, events, synchronize, warmup: int, repeats: int) -> float:
    """Median GPU time of `replay()` between two device events."""

    for _ in range(warmup):
        replay()
    times = []
    for _ in range(repeats):
        start, end = events()
        start.record()
        replay()
        end.record()
        end.synchronize()
        times.append(synchronize(start, end))
    return float(np.median(times))


def graph_runner(path, batch: int, length: int | None, inputs: dict, args) -> dict:
    """Atoll's program graph and PyTorch's CUDA graph of the same ONNX model, fp32 and fp16."""
    import cupy  # optional: CuPy, GPU only
    import torch  # optional: PyTorch, the GPU baseline only


    def torch_events():
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def cupy_events():
        return cupy.cuda.Event(), cupy.cuda.Event()

    warm, reps = max(args.warmup, 3), max(args.repeats, 20)
    out, reference = {}, None
    for precision in ("fp32", "fp16"):
        dtype = {"fp32": "float32", "fp16": "float16"}[precision]
        model = TorchGraphModel(str(path), inputs, dtype)
        out[f"torch_graph_{precision}_ms"] = _event_ms(
            model.replay, torch_events, lambda a, b: a.elapsed_time(b), warm, reps)
        got = {k: v.float().cpu().numpy() for k, v in model(inputs).items()}
        reference = reference or got
        ex = program_executor(preemptible_executor(gpu=True))()
        try:
            options = {} if precision == "fp32" else {"precision": precision}
            state = ex.load(import_model(str(path), batch, length, **options))
        except (TypeError, ValueError) as exc:  # a precision the importer does not offer
            out[f"atoll_{precision}_error"] = f"{type(exc).__name__}: {exc}"
            continue
        ours = ex.run(state, inputs)
        with state.stream:
            out[f"atoll_graph_{precision}_ms"] = _event_ms(
                lambda: ex.execute(state), cupy_events, cupy.cuda.get_elapsed_time, warm, reps)
        out[f"ratio_{precision}"] = out[f"atoll_graph_{precision}_ms"] / out[f"torch_graph_{precision}_ms"]
        for label, outputs in (("atoll", ours), ("torch", got)):
            out[f"{label}_{precision}_rel_err"] = max(
                float(np.abs(outputs[k] - reference[k]).max() / max(np.abs(reference[k]).max(), 1e-12))
                for k in reference)
        state = model = None  # free both before the next precision
        cupy.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()
    return out


def _time_direct(run, inputs: dict, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        run(inputs)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(inputs)
        times.append(time.perf_counter() - start)
    return times


def bench(specs: dict[str, tuple[Path, int]], batches: list[int], lengths: list[int], args) -> dict:
    vgpus = discover_vgpus(args.vgpu_mode)
    chosen = next((v for v in vgpus if v.id == (args.vgpu or vgpus[0].id)), None)
    if chosen is None:
        raise KeyError(f"no vGPU {args.vgpu!r}; have {', '.join(v.id for v in vgpus)}")
    compare_note, make_runner = _comparator(args.compare)
    rng = np.random.default_rng(0)
    results, skipped = [], []
    points = [
        (name, b, length)
        for name, (path, max_batch) in specs.items()
        for b in batches
        for length in (lengths if _has_length(path) else [None])
    ]
    with WorkerPool([chosen], executor=args.executor) as pool, contextlib.ExitStack() as arenas:
        loaded, rows = {}, {}
        for name, (path, _max) in specs.items():
            spec, in_bytes, out_bytes = _row_spec(path, max(lengths or [1]))
            try:
                loaded[name] = pool.load_model(name, path, batch=spec)[chosen.id]
            except WorkerError as exc:
                skipped.append({"model": name, "reason": str(exc)})
                continue
            rows[name] = arenas.enter_context(contextlib.closing(
                BatchRows(pool, chosen.id, name, spec, max(batches), in_bytes, out_bytes)))  # fmt: skip
        sessions = {}
        for name, batch, length in tqdm(points, desc="bench models", unit="point", file=sys.stderr):
            path, max_batch = specs[name]
            if name not in loaded:
                continue
            if max_batch and batch > max_batch:
                skipped.append({"model": name, "batch": batch, "reason": f"above max_batch_size {max_batch}"})
                continue
            inputs = _inputs(path, batch, length or 1, rng)
            round_trips, computes = [], []
            try:
                for i in range(args.warmup + args.repeats):
                    start = time.perf_counter()
                    rows[name].write(inputs)  # a front end's copy in, the run, the outputs copied back
                    rows[name].run()
                    if i >= args.warmup:
                        round_trips.append(time.perf_counter() - start)
                        computes.append(pool.workers[chosen.id].last_batch_seconds)
            except WorkerError as exc:
                skipped.append({"model": name, "batch": batch, "length": length, "reason": str(exc)})
                continue
            point = {
                "model": name,
                "batch": batch,
                **({"length": length} if length else {}),
                "latency_ms": percentiles(round_trips, qs=(50, 95), digits=4),
                "compute_ms": percentiles(computes, qs=(50, 95), digits=4),
                "throughput_items_s": batch / float(np.median(round_trips)),
            }
            if make_runner is graph_runner:
                point["compare"] = graph_runner(path, batch, length, inputs, args)
            elif make_runner:
                if name not in sessions:
                    sessions[name] = make_runner(path)
                times = _time_direct(sessions[name], inputs, args.warmup, args.repeats)
                point["compare"] = {
                    "latency_ms": percentiles(times, qs=(50, 95), digits=4),
                    "throughput_items_s": batch / float(np.median(times)),
                }
            results.append(point)
    return {
        "bench": "models",
        "executor": args.executor,
        "vgpu": {k: v for k, v in chosen.__dict__.items() if k != "env"},
        "loaded": loaded,
        "device": _device(chosen),
        "versions": _versions(),
        "settings": {"batches": batches, "lengths": lengths, "repeats": args.repeats, "warmup": args.warmup},
        **({"compare": compare_note} if compare_note else {}),
        "results": results,
        "skipped": skipped,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _device(vgpu) -> dict:
    return {
        "cpu": _cpu_model(),
        "cpu_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "gpu": None if vgpu.kind == "cpu" else vgpu.name,
        "platform": platform.platform(),
        # Other work on the machine shows here; a shared machine makes every figure noisier.
        "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def _versions() -> dict:
    return {
        "atoll": __version__,
        "python": sys.version.split()[0],
        **{name: p.get("version") for name, p in probe_executors().items() if p.get("available")},
    }


def _table(doc: dict) -> str:
    head = f"{doc['executor']} on {doc['vgpu']['id']} ({doc['device']['gpu'] or doc['device']['cpu']})"
    graphs = doc.get("compare", {}).get("kind") == "torch-graph"
    extra = ""
    if graphs:
        extra = "  " + " ".join(f"{h:>9}" for h in ("atoll32", "torch32", "x32", "atoll16", "torch16", "x16"))
    elif doc.get("compare", {}).get("runtime"):
        extra = "  cmp ms  cmp items/s"
    lines = [head, f"{'model':<20} {'batch':>5} {'len':>5} {'p50 ms':>9} {'p95 ms':>9} {'comp ms':>9} {'items/s':>9}"
             + extra]
    for r in doc["results"]:
        line = (f"{r['model']:<20} {r['batch']:>5} {r.get('length', '-'):>5} {r['latency_ms']['p50']:>9.2f}"
                f" {r['latency_ms']['p95']:>9.2f} {r['compute_ms']['p50']:>9.2f} {r['throughput_items_s']:>9.1f}")
        if graphs:
            c = r["compare"]
            line += "  " + " ".join(f"{c.get(k, float('nan')):>9.3f}" for k in (
                "atoll_graph_fp32_ms", "torch_graph_fp32_ms", "ratio_fp32",
                "atoll_graph_fp16_ms", "torch_graph_fp16_ms", "ratio_fp16"))
        elif "compare" in r:
            line += f" {r['compare']['latency_ms']['p50']:>7.2f} {r['compare']['throughput_items_s']:>11.1f}"
        lines.append(line)
    for s in doc["skipped"]:
        lines.append(f"skipped {s['model']}" + (f" batch {s['batch']}" if "batch" in s else "") + f": {s['reason']}")
    if doc.get("compare", {}).get("skipped"):
        lines.append(f"compare {doc['compare']['kind']} skipped: {doc['compare']['skipped']}")
    return "\n".join(lines)
