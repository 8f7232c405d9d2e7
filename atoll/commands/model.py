"""`atoll model check PATH.onnx`: run a model on one of our executors and on onnxruntime with the
same seeded input and report the difference (exit 1 above the precision's tolerance,
`gpu_runtime.model_check.TOLERANCES`)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from google.protobuf.message import DecodeError
from gpu_runtime.compiler.importer import import_model, missing_operators
from gpu_runtime.executors import REFERENCE_EXECUTOR, program_executor, program_executors
from gpu_runtime.model_check import TOLERANCES, compare

def register(subparsers) -> None:
    parser = subparsers.add_parser("model", help="inspect and check ONNX models")
    sub = parser.add_subparsers(dest="model_command", metavar="ACTION")
    sub.required = True
    p = sub.add_parser("check", help="compare our executor with onnxruntime on a seeded input")
    p.add_argument("path", help="ONNX file (or a Triton model directory holding 1/model.onnx)")
    p.add_argument("--executor", choices=program_executors(), default=REFERENCE_EXECUTOR)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--length", type=int, default=200,
                   help="frames for a dynamic (non-batch) input dimension (default 200)")
    p.add_argument("--precision", choices=sorted(TOLERANCES), default="fp32",
                   help="storage of activations and weights: " + ", ".join(
                       f"{k} (tolerance {v:g})" for k, v in TOLERANCES.items()))
    p.add_argument("--rtol", type=float, default=None,
                   help="tolerance on max|ours - ort| / max|ort| (default: the precision's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the report as JSON to stdout")
    p.set_defaults(func=run_check)


def _resolve(path: str):
    p = Path(path)
    if p.is_dir():
        p = p / "1" / "model.onnx"
    if not p.is_file():
        raise FileNotFoundError(f"no ONNX file at {p}")
    return p


def run_check(args) -> int:
    try:
        path = _resolve(args.path)
        model = onnx.load(str(path))
        missing = missing_operators(model)
        if missing:
            raise ValueError(f"{path}: the kernel runtime lacks operator(s) {', '.join(missing)} "
                             f"(served, this model runs on onnxruntime)")
        t0 = time.perf_counter()
        program = import_model(model, args.batch, args.length, precision=args.precision)
        import_s = time.perf_counter() - t0
        executor = program_executor(args.executor)()
    except (OSError, ValueError, RuntimeError, DecodeError) as e:  # unsupported model, no GPU
        print(f"atoll model check: {e}", file=sys.stderr)
        return 2
    rng = np.random.default_rng(args.seed)
    feeds = {name: rng.standard_normal(program.buffers[i].shape).astype(np.float32)
             for name, i in program.inputs.items()}
    state = executor.load(program)
    executor.run(state, feeds)  # warm-up: compiles kernels, touches memory
    t0 = time.perf_counter()
    got = executor.run(state, feeds)
    run_s = time.perf_counter() - t0
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    outputs = compare(got, want)
    worst = max(o["max_rel"] for o in outputs.values())
    rtol = TOLERANCES[args.precision] if args.rtol is None else args.rtol
    report = {"model": str(path), "executor": args.executor, "batch": args.batch,
              "precision": args.precision,
              "inputs": {k: list(v.shape) for k, v in feeds.items()}, "launches": len(program.launches),
              "arena_bytes": program.arena_bytes, "weight_bytes": program.weight_bytes,
              "import_s": import_s, "run_s": run_s, "outputs": outputs, "rtol": rtol,
              "ok": worst <= rtol}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{path}: {args.precision}, {len(program.launches)} launches, arena "
              f"{program.arena_bytes / 1e6:.1f} MB, {args.executor} run {run_s * 1e3:.1f} ms")
        for name, o in outputs.items():
            print(f"  {name} {o['shape']}: max abs {o['max_abs']:.3e}, max rel {o['max_rel']:.3e}")
        print(f"OK (tolerance {rtol:g})" if report["ok"] else f"FAILED: max rel {worst:.3e} > {rtol:g}")
    return 0 if report["ok"] else 1
