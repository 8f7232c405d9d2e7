#!/usr/bin/env python3
"""Atoll's kernels on a GPU, per zoo model: the error against onnxruntime and one inference replayed
as a CUDA graph, beside PyTorch's CUDA-graph replay of the same ONNX graph (fp32 without TF32, fp16).

    python3 tools/gpu_check.py [--models NAME ...] [--batches 1 32] [--precisions fp32 fp16]
    python3 tools/gpu_check.py --device cpu ...    the same rows on the CPU (the dry run)

Per model (zoo seed 0, audio at 300 frames), batch and precision, gpu_check.json in $OUT (or .) gets
the error (within `atoll model check`'s tolerance or not), the median replay (CUDA events), per-kernel
times and the torch-graph medians; a failing model is reported, the others go on. Kernels: the cubin
cache (nvcc-built first where installed), else NVRTC; on the CPU, their NumPy references.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from atoll.bench.torch_eager import TorchGraphModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_runtime.compiler.importer import import_model
from gpu_runtime.executors import preemptible_executor, program_executor
from gpu_runtime.kernels import cubins, markers
from gpu_runtime.model_check import TOLERANCES
from gpu_runtime.zoo import MODELS, build

AUDIO_FRAMES = 300
TARGET_RATIO = 1.25


def build_cubins(kernels: dict, arch: str) -> dict:
    """nvcc-compiles what the cache lacks for `arch` (the executor then loads cubins only)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return {"kernels": len(kernels), "nvcc": None, "note": "no nvcc: NVRTC at load"}
    t0 = time.perf_counter()
    reports = cubins.build(kernels.values(), [arch], nvcc)
    return {"kernels": len(kernels), "arch": arch, "wall_s": round(time.perf_counter() - t0, 1),
            "failed": [r.name for r in reports if not r.ok],
            "spilled": [r.name for r in reports if r.spills]}


def _median_host_ms(fn, repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def _median_ms(cp, stream, fn, repeats: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    stream.synchronize()
    times = []
    for _ in range(repeats):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return float(np.median(times))


def per_kernel(cp, ex, state, passes: int = 3) -> dict[str, list]:
    """{kernel name: [launches, ms]}: each launch alone between events, the fastest of `passes`."""
    n = len(state.program.launches)
    best = np.full(n, np.inf)
    for _ in range(passes):
        events = [cp.cuda.Event() for _ in range(n + 1)]
        with state.stream:
            events[0].record(state.stream)
            for i in range(n):
                ex.launch(state, i)
                events[i + 1].record(state.stream)
        events[-1].synchronize()
        best = np.minimum(best, [cp.cuda.get_elapsed_time(events[i], events[i + 1])
                                 for i in range(n)])
    table: dict[str, list] = {}
    for launch, ms in zip(state.program.launches, best):
        entry = table.setdefault(launch.kernel.name, [0, 0.0])
        entry[0] += 1
        entry[1] = round(entry[1] + float(ms), 4)
    return dict(sorted(table.items(), key=lambda kv: -kv[1][1]))


def torch_graph_ms(onnx_path: str, feeds: dict[str, np.ndarray], dtype: str, repeats: int) -> float:
    import torch  # optional: PyTorch, the GPU baseline only

    model = TorchGraphModel(onnx_path, feeds, dtype)
    stream = torch.cuda.current_stream()
    for _ in range(5):
        model.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        model.replay()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end))
    del model
    torch.cuda.empty_cache()
    return float(np.median(times))


def _onnxruntime(model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _max_rel(got: dict, want: dict) -> float:
    return max(float(np.abs(got[k].astype(np.float64) - want[k]).max() / np.abs(want[k]).max())
               for k in want)


def environment(cp) -> dict:
    props = cp.cuda.runtime.getDeviceProperties(0)
    env = {"device": props["name"].decode(), "cupy": cp.__version__,
           "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
           "cuda_driver": cp.cuda.runtime.driverGetVersion(), "sm_count": props["multiProcessorCount"],
           "compute_capability": f"{props['major']}.{props['minor']}"}
    try:
        import torch  # optional: PyTorch, the GPU baseline only

        env["torch"] = torch.__version__
    except ImportError:
        env["torch"] = None
    return env


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "fp16"])
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    args = parser.parse_args(argv)
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    gpu = args.device == "cuda"
    if gpu:
        import cupy as cp  # optional: CuPy, GPU only

    report = {"what": "tools/gpu_check.py: Atoll graph replay vs torch graph replay per zoo model",
              "env": environment(cp) if gpu else {"device": "cpu"}, "results": {}, "errors": {}}
    programs, models, feeds_of = {}, {}, {}
    for name in args.models:
        try:
            models[name] = build(name, seed=0)
        except Exception:
            report["errors"][name] = traceback.format_exc(limit=3)
            continue
        length = AUDIO_FRAMES if MODELS[name].kind == "audio" else None
        for batch in args.batches:
            entry = MODELS[name]
            shape = (batch,) + tuple(length if d == -1 else d for d in entry.input_dims)
            feeds_of[name, batch] = {entry.input_name: np.random.default_rng(0).standard_normal(
                shape).astype(np.float32)}
            for precision in args.precisions:
                key = f"{name}/b{batch}/{precision}"
                try:
                    t0 = time.perf_counter()
                    programs[key] = import_model(models[name], batch, length, precision=precision)
                    report["results"][key] = {"launches": len(programs[key].launches),
                                              "import_s": round(time.perf_counter() - t0, 2)}
                except Exception:
                    report["errors"][key] = traceback.format_exc(limit=3)
    kernels = dict(markers.KERNELS)  # the executor's own, beside the programs'
    for program in programs.values():
        kernels.update(program.kernels())
    if gpu:
        report["cubins"] = build_cubins(kernels, cp.cuda.Device().compute_capability)
        print(f"cubins: {report['cubins']}", flush=True)
    references = {}
    ex = program_executor(preemptible_executor(gpu=gpu))()
    with tempfile.TemporaryDirectory() as tmp:
        for key, program in programs.items():
            name, batch, precision = key.split("/")
            batch = int(batch[1:])
            row = report["results"][key]
            state = None
            try:
                feeds = feeds_of[name, batch]
                if (name, batch) not in references:
                    references[name, batch] = _onnxruntime(models[name], feeds)
                state = ex.load(program)
                err = _max_rel(ex.run(state, feeds), references[name, batch])
                row.update(max_rel=err, tolerance=TOLERANCES[precision],
                           ok=bool(err <= TOLERANCES[precision]))
                if gpu:
                    row["graph_ms"] = _median_ms(cp, state.stream, lambda: ex.execute(state),
                                                 args.repeats)
                    row["by_kernel"] = per_kernel(cp, ex, state)
                else:
                    row["graph_ms"] = _median_host_ms(lambda: ex.run(state, feeds), args.repeats)
            except Exception:
                row["error"] = traceback.format_exc(limit=4)
            finally:
                state = None
                if gpu:
                    cp.get_default_memory_pool().free_all_blocks()
            if args.no_torch or not gpu or "error" in row:
                continue
            path = Path(tmp) / f"{name}.onnx"
            if not path.exists():
                onnx.save(models[name], str(path))
            for dtype in ("float32", "float16"):
                field = f"torch_graph_{'fp32' if dtype == 'float32' else 'fp16'}_ms"
                try:
                    row[field] = torch_graph_ms(str(path), feeds_of[name, batch], dtype,
                                                args.repeats)
                except Exception:
                    row[field + "_error"] = traceback.format_exc(limit=3)
            print(f"{key}: done", flush=True)
    report["total_s"] = round(time.perf_counter() - t_start, 1)
    (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=1))
    print(f"\n{report['env']['device']}: {len(kernels)} kernels, total {report['total_s']} s; "
          f"JSON in {out_dir / 'gpu_check.json'}")
    print(f"{'model/batch/precision':32s} {'launch':>6s} {'atoll':>8s} {'torch32':>8s} "
          f"{'torch16':>8s} {'ratio':>6s} {'max_rel':>9s}")
    for key, row in report["results"].items():
        torch_ms = row.get(f"torch_graph_{key.split('/')[2]}_ms")
        ratio = row["graph_ms"] / torch_ms if torch_ms and "graph_ms" in row else None
        verdict = "" if ratio is None else ("  ok" if ratio <= TARGET_RATIO else "  SLOW")
        if "error" in row:
            print(f"{key:32s} ERROR {row['error'].strip().splitlines()[-1][:80]}")
            continue
        print(f"{key:32s} {row['launches']:6d} {row.get('graph_ms', float('nan')):8.3f} "
              f"{row.get('torch_graph_fp32_ms', float('nan')):8.3f} "
              f"{row.get('torch_graph_fp16_ms', float('nan')):8.3f} "
              f"{ratio if ratio is not None else float('nan'):6.2f} {row.get('max_rel', float('nan')):9.2e}"
              f"{'' if row.get('ok', True) else '  WRONG'}{verdict}")
    for key, err in report["errors"].items():
        print(f"{key}: ERROR {err.strip().splitlines()[-1][:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
