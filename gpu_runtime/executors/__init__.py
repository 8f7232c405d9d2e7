"""The executor registry: every model executor by name, with what config, CLI, discovery and the
scheduler need to know about it. One table (`EXECUTORS`); nothing else spells executor names.

A spec names (as "module:attr", imported only when first used):
- `loader(onnx_path, info, max_batch)` -> an object with `run(inputs) -> outputs` (dicts of arrays
  by tensor name) and a `describe()` dict, for the vGPU worker. Loaders import their backend inside
  the worker process, after the vGPU's environment is set, so CUDA is never touched before that;
- `program_executor`: the class that runs kernel programs launch by launch (None for whole-graph
  executors), which `atoll model check` and the REEF scheduler drive;
- `probe()` -> {"version": ...}, raising when the backend cannot run here (`atoll info`).
`preemptible` says whether the scheduler can preempt its work (kernel programs with the guard).
"""

from __future__ import annotations

import importlib
import shutil
from dataclasses import dataclass

import numpy
import onnxruntime

from gpu_runtime import green_context as vgpu_green_context
from gpu_runtime.compiler.shapes import ModelShapes
from gpu_runtime.executors.cupy_executor import CupyExecutor
from gpu_runtime.executors.emulated_executor import EmulatedExecutor
from gpu_runtime.executors.numpy_executor import NumpyExecutor
from gpu_runtime.executors.ort_executor import OrtExecutor
from gpu_runtime.executors.rt_launcher import NativeBuildError, RtLauncher
from gpu_runtime.kernels.emulator import CXX


@dataclass(frozen=True)
class ExecutorSpec:
    name: str
    loader: str
    probe: str
    preemptible: bool
    program_executor: str | None = None
    gpu: bool = False  # needs a CUDA device (else it runs on CPU vGPUs too)
    description: str = ""


EXECUTORS: dict[str, ExecutorSpec] = {
    spec.name: spec for spec in (
        ExecutorSpec("onnxruntime", "gpu_runtime.executors:load_onnxruntime",
                     "gpu_runtime.executors:probe_onnxruntime", preemptible=False,
                     description="whole-graph onnxruntime (fast CPU path, not preemptible)"),
        ExecutorSpec("numpy", "gpu_runtime.executors:load_numpy", "gpu_runtime.executors:probe_numpy",
                     preemptible=True,
                     program_executor="gpu_runtime.executors.numpy_executor:NumpyExecutor",
                     description="kernel programs with NumPy bodies (reference, preemptible)"),
        ExecutorSpec("cupy", "gpu_runtime.executors:load_cupy", "gpu_runtime.executors:probe_cupy",
                     preemptible=True, gpu=True,
                     program_executor="gpu_runtime.executors.cupy_executor:CupyExecutor",
                     description="our guarded CUDA kernels via NVRTC, captured as CUDA graphs"),
        ExecutorSpec("cuda-emu", "gpu_runtime.executors:load_cuda_emu",
                     "gpu_runtime.executors:probe_cuda_emu", preemptible=True,
                     program_executor="gpu_runtime.executors.emulated_executor:EmulatedExecutor",
                     description="the same CUDA kernels compiled with g++ and run on the CPU "
                                 "(checks the CUDA side without a GPU; slow)"),
    )
}


class UnknownExecutor(ValueError):
    pass


def spec(executor: str) -> ExecutorSpec:
    try:
        return EXECUTORS[executor]
    except KeyError:
        raise UnknownExecutor(
            f"unknown executor {executor!r}; available: {', '.join(sorted(EXECUTORS))}"
        ) from None


def _resolve(target: str):
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def loader(executor: str):
    return _resolve(spec(executor).loader)


def program_executor(executor: str):
    """The kernel-program executor class of `executor` (ValueError for whole-graph executors)."""
    s = spec(executor)
    if s.program_executor is None:
        raise ValueError(f"executor {executor!r} runs whole graphs, not kernel programs; "
                         f"choose from {', '.join(n for n, x in EXECUTORS.items() if x.program_executor)}")
    return _resolve(s.program_executor)


def preemptible_executor(gpu: bool) -> str:
    """The first preemptible executor for a GPU (or a CPU) vGPU."""
    return next(n for n, s in EXECUTORS.items() if s.preemptible and s.gpu == gpu)


def resolve_executor(executor: str, vgpus) -> str:
    """What `auto` means on these vGPUs: our CUDA kernels on GPUs where CuPy works, onnxruntime
    (the fast whole-graph CPU path) on CPU vGPUs; any other name as given."""
    if executor != "auto":
        return executor
    gpu = preemptible_executor(gpu=True)
    on_gpu = any(v.kind != "cpu" for v in vgpus)
    return gpu if on_gpu and probe_executors()[gpu]["available"] else "onnxruntime"


def probe_executors() -> dict[str, dict]:
    """What each executor can use here: {"numpy": {"available": True, "version": ...}, ...}.
    Never raises: a missing or broken backend is reported with its reason."""
    out = {}
    for name, s in EXECUTORS.items():
        try:
            out[name] = {"available": True, **_resolve(s.probe)()}
        except Exception as exc:  # any failure is a reason to report, not to crash `atoll info`
            out[name] = {"available": False, "reason": f"{type(exc).__name__}: {exc}".strip()}
    return out


def probe_numpy() -> dict:
    return {"version": numpy.__version__}


def probe_onnxruntime() -> dict:
    return {"version": onnxruntime.__version__, "providers": onnxruntime.get_available_providers()}


def probe_cuda_emu() -> dict:
    if shutil.which(CXX) is None:
        raise RuntimeError(f"no C++ compiler ({CXX}) to build the emulated kernels")
    return {"version": "g++ (CUDA C sources on CPU fibers)"}


def probe_cupy() -> dict:
    import cupy  # optional: CuPy, GPU only

    devices = cupy.cuda.runtime.getDeviceCount()  # raises without a driver
    if devices < 1:
        raise RuntimeError("CUDA driver present but no device")

    try:
        RtLauncher()
        launcher = "native"
    except (NativeBuildError, OSError) as exc:  # RT tasks are then launched from Python
        launcher = f"python ({exc})"
    return {
        "version": cupy.__version__,
        "devices": devices,
        "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
        "rt_launcher": launcher,
    }


def load_onnxruntime(onnx_path, info, max_batch=None):
    """Whole-graph onnxruntime; any batch size the graph accepts (`max_batch` is not needed)."""

    device = "cpu" if info.kind == "cpu" else "cuda"
    return OrtExecutor(onnx_path, intra_op_threads=info.threads, device=device)


class ProgramRunner:
    """A kernel-program executor (numpy, cupy) behind the worker's run(inputs) call. Programs are
    planned per input shape (`model_shapes`) on first use and kept, so each bucketed batch size is
    imported once; with `max_batch`, fixed-shape models are planned up front for the sizes
    `ModelShapes.planned_keys` names, so the first batch of those sizes does not pay for the import
    (and, on cupy, NVRTC)."""

    def __init__(self, executor, onnx_path, stream=None, max_batch=None):
        self.executor = executor
        self.stream = stream  # every state's stream, when the vGPU dictates one (green contexts)
        self.shapes = ModelShapes(onnx_path)
        self.states: dict[tuple[int, int | None], object] = {}
        for key in self.shapes.planned_keys(max_batch):
            self._state(key)

    def _state(self, key: tuple[int, int | None]):
        if key not in self.states:
            program = self.shapes.program(key)
            # Copies, graph captures, launches and syncs must all use the partition's stream.
            self.states[key] = (self.executor.load(program, stream=self.stream) if self.stream
                                else self.executor.load(program))
        return self.states[key]

    def run(self, inputs):
        state = self._state(self.shapes.key(inputs))
        self.executor.set_inputs(state, inputs)
        self.executor.execute(state)
        return self.executor.outputs(state)

    def describe(self) -> dict:
        return {"executor": self.executor.name, "preemptible": self.executor.preemptible}


def load_numpy(onnx_path, info, max_batch=None):
    return ProgramRunner(NumpyExecutor(), onnx_path, max_batch=max_batch)


def load_cupy(onnx_path, info, max_batch=None):
    """On a green-context vGPU all work goes to the partition's stream: CuPy makes the device's
    primary context current on first use, so only streams made inside the green context (measured on
    an H100: 16 of 132 SMs ran a compute-bound kernel 7.8x slower) stay on the partition."""

    green = vgpu_green_context.active()
    stream = None
    if green:
        import cupy  # optional: CuPy, GPU only

        stream = cupy.cuda.ExternalStream(int(green["stream"]))
    return ProgramRunner(CupyExecutor(), onnx_path, stream=stream, max_batch=max_batch)


def load_cuda_emu(onnx_path, info, max_batch=None):
    return ProgramRunner(EmulatedExecutor(), onnx_path, max_batch=max_batch)
