"""The GPU step of residency (issue 45, docs/residency.md): models switching on one GPU.

MobileNetV3-small and Swin-T from the zoo and a ResNet-50-sized model (the zoo has no ResNet: a
MatMul chain with ResNet-50's ~98 MB of fp32 weights, `atoll.bench.switch_models`) share one pool
half the size of their weights (at least the largest's), taking turns, so nearly every request
switches its model in. A
switch is residency's own path (`gpu_runtime.residency`): the pool allocated once, pinned host
images, each layer group copied on a copy stream with an event behind it, and the kernels (our
cupy executor's, one launch at a time) waiting on the stream for the event of the group they need.

Per model: start-up overhead (request -> first kernel start, CUDA events), total overhead (the
switched request over the same request resident), the weights' transfer time at the PCIe bandwidth
measured here (pinned host -> device, one large copy), and the targets: start-up <= 3.6 ms (the low
end of PipeSwitch's 3.6-6.6 ms on V100/T4 over PCIe 3) and total overhead <= 1.5x the transfer time.

Then the serving path (`serve` in the JSON): the same models loaded by REEF's engine as `atoll
serve` loads them (the cupy executor's CUDA graphs, REEF's chunk graphs, the virtual pool: each
model at its own addresses, the pool's chunks mapped under them at a switch, each graph waiting on
the events of its own groups), taking turns in a pool of about half their footprint. Per model: the
host's start-up (request to the first graph launched), request to the last group, and the total
overhead over the same request resident; every answer checked against the first resident one.

    python tools/gpu_switch.py --out DIR          # on a GPU, about a minute (<= 3 minutes)
    python tools/gpu_switch.py --dry-run          # the same paths on the CPU (NumPy executor, the
                                                  # copy thread at a simulated 12 GB/s; the serving
                                                  # path on the CUDA emulator), small models
Writes DIR/switch.json (default: $OUT, else bench/results/switch_gpu.json or switch_gpu_dry.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from atoll.bench.switch_models import mlp  # noqa: E402  (numpy + onnx only: the GPU image has them)
from gpu_runtime import zoo  # noqa: E402
from gpu_runtime.compiler.importer import import_model  # noqa: E402
from gpu_runtime.executors.cupy_executor import CupyExecutor  # noqa: E402
from gpu_runtime.executors.numpy_executor import NumpyExecutor  # noqa: E402
from gpu_runtime.priority import Priority  # noqa: E402
from gpu_runtime.residency.manager import Residency, measure_launches  # noqa: E402
from gpu_runtime.residency.settings import GROUP_OVERHEAD_S, ResidencySettings  # noqa: E402
from gpu_runtime.residency.transfer import CupyCopier, HostCopier  # noqa: E402
from gpu_runtime.residency.vmm import round_up  # noqa: E402
from gpu_runtime.residency.vmm_host import GRANULARITY  # noqa: E402
from gpu_runtime.vgpu.discovery import discover_vgpus  # noqa: E402
from scheduler.vgpu_engine import ReefEngine  # noqa: E402

STARTUP_TARGET_MS = 3.6
TOTAL_OVER_TRANSFER_TARGET = 1.5
RESNET50_BYTES = 97.5e6  # ResNet-50's 25.6 M fp32 parameters
DRY_BANDWIDTH = 12e9  # the simulated link of the dry run (PCIe 3 x16)
GPU_CHUNK = 2 << 20  # the virtual pool's chunk on current GPUs (cuMemGetAllocationGranularity)


def models(dry: bool) -> dict[str, onnx.ModelProto]:
    """name -> ONNX model: the GPU's three, or small stand-ins for the dry run."""
    with tempfile.TemporaryDirectory() as tmp:
        if dry:  # MobileNetV3 at CPU size, and a small chain for the others
            mnv3 = zoo.build("mobilenet_v3_small", seed=0)
            dims = mnv3.graph.input[0].type.tensor_type.shape.dim
            dims[2].dim_value = dims[3].dim_value = 64
            return {"mobilenet_v3_small": mnv3, "chain_small": onnx.load(mlp(Path(tmp) / "c.onnx", 1, 4, 256))}
        width = 2048
        layers = round(RESNET50_BYTES / (width * width * 4))
        return {"mobilenet_v3_small": zoo.build("mobilenet_v3_small", seed=0),
                "resnet50_sized": onnx.load(mlp(Path(tmp) / "r.onnx", 1, layers, width)),
                "swin_t": zoo.build("swin_t", seed=0)}


def admit(residency: Residency, name: str) -> None:
    """Admit a request and wait until it may start (an earlier switch's copy may hold its victim)."""
    admitted = threading.Event()
    residency.admit(name, False, admitted.set)
    admitted.wait()


class CpuSide:
    """The dry run: the NumPy executor, host timing, the copy thread at a simulated bandwidth."""

    def __init__(self):
        self.executor = NumpyExecutor(blas_threads=1)
        self.copier = HostCopier(DRY_BANDWIDTH, GROUP_OVERHEAD_S)
        self.pinned = None
        self.description = "CPU dry run (NumPy executor, copy thread at a simulated 12 GB/s)"

    def pool(self, nbytes: int):
        return np.zeros(nbytes, np.uint8)

    def link(self) -> tuple[float, float]:
        return DRY_BANDWIDTH, GROUP_OVERHEAD_S

    def request(self, residency: Residency, name: str, state) -> dict:
        t0 = time.perf_counter()
        admit(residency, name)
        gate = state.residency_gate
        switch, gate.watch = gate.watch, None
        first = t0
        for i in range(len(state.program.launches)):
            need = state.residency_need[i]
            if gate.arrived < need:
                gate.wait_for(need)
            if i == 0:
                first = time.perf_counter()
            self.executor.launch(state, i)
        end = time.perf_counter()
        residency.release(name)
        return {"switched": switch is not None, "startup_s": first - t0, "total_s": end - t0}


class CudaSide:
    """The GPU: our cupy executor launch by launch on one stream, CUDA events for the times."""

    def __init__(self):
        import cupy  # optional: CuPy, GPU only

        self.cp = cupy
        self.executor = CupyExecutor()
        self.copier = CupyCopier()
        self.pinned = self.copier.pinned
        self.stream = cupy.cuda.Stream(non_blocking=True)
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        self.description = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])

    def pool(self, nbytes: int):
        return self.cp.zeros(nbytes, self.cp.uint8)

    def link(self) -> tuple[float, float]:
        """(bytes/s of one 256 MB pinned host -> device copy, seconds of a 4 KB one): PCIe as measured."""
        cp = self.cp
        big, small = self.pinned(256 << 20), self.pinned(4096)
        dbig, dsmall = cp.empty(big.size, cp.uint8), cp.empty(small.size, cp.uint8)
        s = self.copier.stream

        def timed(dst, src, reps: int) -> float:
            start, end = cp.cuda.Event(), cp.cuda.Event()
            out = []
            for _ in range(reps):
                start.record(s)
                dst.set(src, stream=s)
                end.record(s)
                end.synchronize()
                out.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
            return statistics.median(out)

        timed(dbig, big, 1)
        return big.size / timed(dbig, big, 5), timed(dsmall, small, 20)

    def request(self, residency: Residency, name: str, state) -> dict:
        cp, s = self.cp, self.stream
        t0 = time.perf_counter()
        admit(residency, name)
        gate = state.residency_gate
        switch, gate.watch = gate.watch, None
        begin, first, end = cp.cuda.Event(), cp.cuda.Event(), cp.cuda.Event()
        begin.record(s)
        host_s = time.perf_counter() - t0
        waited = 0
        for i in range(len(state.program.launches)):
            need = state.residency_need[i]
            if switch is not None and need > waited:
                switch.wait_on(s, need)  # the stream waits for the group's event; the host does not
                waited = need
            if i == 0:
                first.record(s)
            self.executor.launch(state, i, s)
        end.record(s)
        end.synchronize()
        residency.release(name)
        return {"switched": switch is not None,
                "startup_s": host_s + cp.cuda.get_elapsed_time(begin, first) / 1e3,
                "total_s": host_s + cp.cuda.get_elapsed_time(begin, end) / 1e3}


def run(dry: bool, rounds: int) -> dict:
    side = CpuSide() if dry else CudaSide()
    programs = {name: import_model(model, batch=1, name=name) for name, model in models(dry).items()}
    states = {name: side.executor.load(p) for name, p in programs.items()}
    exec_s = {name: measure_launches(side.executor, st) for name, st in states.items()}
    bandwidth, overhead = side.link()
    weights = {name: p.weight_bytes for name, p in programs.items()}
    budget = max(sum(weights.values()) // 2, max(weights.values()))  # the largest fits alone
    residency = Residency(side.pool(budget), side.copier, bandwidth, overhead, "gpu0",
                          image_allocate=side.pinned)
    groups = {name: residency.add(name, [states[name]], exec_s[name])["groups"] for name in programs}
    rows: dict[str, list[dict]] = {name: [] for name in programs}
    for name in programs:  # one unmeasured turn: from here on each model's turn finds it evicted
        side.request(residency, name, states[name])
    for _ in range(rounds):
        for name in programs:  # in turn: each comes back after the others pushed it out
            cold = side.request(residency, name, states[name])
            warm = side.request(residency, name, states[name])
            if cold["switched"] and not warm["switched"]:
                rows[name].append({"startup_ms": cold["startup_s"] * 1e3,
                                   "total_overhead_ms": (cold["total_s"] - warm["total_s"]) * 1e3,
                                   "resident_ms": warm["total_s"] * 1e3})
    side.copier.close()
    out = {}
    for name, measured in rows.items():
        transfer_ms = weights[name] / bandwidth * 1e3
        figures = {k: round(statistics.median(r[k] for r in measured), 3) for k in measured[0]} if measured else {}
        out[name] = {"weights_mb": round(weights[name] / 2**20, 2), "launches": len(programs[name].launches),
                     "groups": groups[name], "switches": len(measured), "transfer_ms": round(transfer_ms, 3),
                     **figures}  # fmt: skip
        if measured:
            out[name]["startup_ok"] = figures["startup_ms"] <= STARTUP_TARGET_MS
            out[name]["total_over_transfer"] = round(figures["total_overhead_ms"] / transfer_ms, 2)
            out[name]["total_ok"] = out[name]["total_over_transfer"] <= TOTAL_OVER_TRANSFER_TARGET
    return {"device": side.description, "dry_run": dry, "link_gb_s": round(bandwidth / 1e9, 2),
            "copy_overhead_us": round(overhead * 1e6, 2), "budget_mb": round(budget / 2**20, 2),
            "rounds": rounds, "targets": {"startup_ms": STARTUP_TARGET_MS,
                                          "total_over_transfer": TOTAL_OVER_TRANSFER_TARGET},
            "pipeswitch": {"startup_ms": [3.6, 6.6], "total_ms": [5.4, 34.6], "hardware": "V100 / T4, PCIe 3"},
            "models": out}


def serve(dry: bool, rounds: int) -> dict:
    """The serving path: REEF's engine with a residency budget, the models taking turns."""
    chosen = {"chain_a": None, "chain_b": None} if dry else models(False)
    chunk = GRANULARITY if dry else GPU_CHUNK
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for i, (name, model) in enumerate(chosen.items()):
            path = Path(tmp) / f"{name}.onnx"
            if model is None:  # the emulator runs kernels as plain C++: small chains
                mlp(path, i, 4, 256)
            else:
                onnx.save(model, path)
            paths[name] = str(path)
        programs = {name: import_model(onnx.load(path), batch=1, name=name) for name, path in paths.items()}
        # weights and an arena per priority, each range whole chunks, and one more arena as margin
        # (REEF's chunked re-plan may need a larger one than the program's)
        footprint = {name: round_up(p.weight_bytes, chunk) + 3 * round_up(p.arena_bytes, chunk)
                     for name, p in programs.items()}
        budget = max(sum(footprint.values()) // 2, max(footprint.values()))
        settings = ResidencySettings(budget_bytes=budget, bandwidth=DRY_BANDWIDTH if dry else 0.0)
        vgpu = discover_vgpus("cpu", cpu_vgpus=1)[0] if dry else next(v for v in discover_vgpus() if v.kind != "cpu")
        engine = ReefEngine(vgpu, residency=settings)
        try:
            described = {name: engine.load(name, path, "cuda-emu" if dry else "cupy", max_batch=1)["residency"]
                         for name, path in paths.items()}
            return _serve_turns(engine, paths, described, budget, rounds)
        finally:
            engine.close()


def _serve_turns(engine: ReefEngine, paths: dict, described: dict, budget: int, rounds: int) -> dict:
    inputs = {name: _inputs(onnx.load(path)) for name, path in paths.items()}
    residency = engine.residency

    def request(name: str) -> tuple[float, dict]:
        start = time.perf_counter()
        outputs, _ = engine.run(name, inputs[name], Priority.BE).result(120)
        return time.perf_counter() - start, outputs

    expected = {name: request(name)[1] for name in paths}  # one unmeasured turn each
    rows: dict[str, list[dict]] = {name: [] for name in paths}
    wrong = 0
    for _ in range(rounds):
        for name in paths:
            switches = len(residency.stats.switches)
            cold, out = request(name)
            warm, again = request(name)
            wrong += sum(not np.allclose(o, expected[name][k], rtol=1e-3, atol=1e-4)
                         for result in (out, again) for k, o in result.items())
            new = residency.stats.switches[switches:]
            if len(new) == 1 and new[0].model == name:
                switch = new[0]
                rows[name].append({"startup_ms": (switch.first_launch_s - switch.requested_s) * 1e3,
                                   "duration_ms": (switch.arrived_s - switch.requested_s) * 1e3,
                                   "total_overhead_ms": (cold - warm) * 1e3, "resident_ms": warm * 1e3})
    out = {}
    for name, measured in rows.items():
        out[name] = {"footprint_mb": round(described[name]["footprint"] / 2**20, 2),
                     "weights_mb": round(described[name]["weight_bytes"] / 2**20, 2),
                     "groups": described[name]["groups"], "switches": len(measured),
                     **({k: round(statistics.median(r[k] for r in measured), 3) for k in measured[0]}
                        if measured else {})}
    return {"executor": "cuda-emu" if engine.info.kind == "cpu" else "cupy", "budget_mb": round(budget / 2**20, 2),
            "evictions": residency.stats.evictions, "wrong_answers": wrong, "models": out}


def _inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Random batch-1 inputs for the graph's inputs (dynamic dimensions taken as 1)."""
    rng = np.random.default_rng(0)
    initializers = {i.name for i in model.graph.initializer}
    out = {}
    for value in model.graph.input:
        if value.name not in initializers:
            dims = [d.dim_value or 1 for d in value.type.tensor_type.shape.dim]
            out[value.name] = rng.standard_normal(dims).astype(np.float32)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="the same path on the CPU, small models")
    p.add_argument("--rounds", type=int, default=None, help="turns per model (default 10; dry run 1)")
    p.add_argument("--serve-rounds", type=int, default=None,
                   help="turns per model on the serving path (default 3; dry run 1; 0 skips it)")
    p.add_argument("--out", type=Path, default=None, help="directory for switch.json (default $OUT)")
    args = p.parse_args(argv)
    doc = run(args.dry_run, args.rounds or (1 if args.dry_run else 10))
    serve_rounds = args.serve_rounds if args.serve_rounds is not None else (1 if args.dry_run else 3)
    if serve_rounds:
        doc["serve"] = serve(args.dry_run, serve_rounds)
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    path = out / "switch.json" if out else Path("bench/results") / ("switch_gpu_dry.json" if args.dry_run
                                                                    else "switch_gpu.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({"models": doc["models"], "serve": doc.get("serve")}, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
