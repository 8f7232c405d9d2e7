"""The executor registry: every model executor by name, with what config, CLI, discovery and the
scheduler need to know about it. One table (`EXECUTORS`) of references; nothing else spells
executor names (each executor class carries its own `name` and `preemptible`).

A spec holds:
- `executor`: the class; for kernel-program executors also what `atoll model check` and the REEF
  scheduler drive launch by launch (`program_executor`);
- `loader(onnx_path, info, max_batch)`, for the vGPU worker (`executors.loaders`): it runs after the
  vGPU's environment is set, and CuPy is imported only inside it, so CUDA is never touched before;
- `probe()` -> {"version": ...}, raising when the backend cannot run here (`executors.probes`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpu_runtime.executors.cupy_executor import CupyExecutor
from gpu_runtime.executors.emulated_executor import EmulatedExecutor
from gpu_runtime.executors.loaders import load_cuda_emu, load_cupy, load_numpy, load_onnxruntime
from gpu_runtime.executors.numpy_executor import NumpyExecutor
from gpu_runtime.executors.ort_executor import OrtExecutor
from gpu_runtime.executors.probes import probe_cuda_emu, probe_cupy, probe_numpy, probe_onnxruntime


@dataclass(frozen=True)
class ExecutorSpec:
    executor: type
    loader: Callable
    probe: Callable[[], dict]
    runs_programs: bool  # kernel programs launch by launch (else whole graphs)
    gpu: bool = False  # needs a CUDA device (else it runs on CPU vGPUs too)
    device_memory: bool = False  # loads draw on `executor.memory` (device_memory.DeviceMemory)
    description: str = ""

    @property
    def name(self) -> str:
        return self.executor.name

    @property
    def preemptible(self) -> bool:
        return self.executor.preemptible

    @property
    def program_executor(self) -> type | None:
        return self.executor if self.runs_programs else None


EXECUTORS: dict[str, ExecutorSpec] = {
    spec.name: spec for spec in (
        ExecutorSpec(OrtExecutor, load_onnxruntime, probe_onnxruntime, runs_programs=False,
                     description="whole-graph onnxruntime (fast CPU path, not preemptible)"),
        ExecutorSpec(NumpyExecutor, load_numpy, probe_numpy, runs_programs=True,
                     description="kernel programs with NumPy bodies (reference, preemptible)"),
        ExecutorSpec(CupyExecutor, load_cupy, probe_cupy, runs_programs=True, gpu=True, device_memory=True,
                     description="our guarded CUDA kernels via NVRTC, captured as CUDA graphs"),
        ExecutorSpec(EmulatedExecutor, load_cuda_emu, probe_cuda_emu, runs_programs=True, device_memory=True,
                     description="the same CUDA kernels compiled with g++ and run on the CPU "
                                 "(checks the CUDA side without a GPU; slow)"),
    )
}
# What config and the CLI accept: `auto` (see `resolve_executor`) or a registered name.
AUTO = "auto"
EXECUTOR_CHOICES = (AUTO, *EXECUTORS)
# The whole-graph CPU path: what `auto` falls back to without a usable GPU, and the pool's default.
DEFAULT_EXECUTOR = OrtExecutor.name
# The reference kernel-program executor (NumPy bodies), what `atoll model check` runs by default.
REFERENCE_EXECUTOR = NumpyExecutor.name


class UnknownExecutor(ValueError):
    pass


def spec(executor: str) -> ExecutorSpec:
    try:
        return EXECUTORS[executor]
    except KeyError:
        raise UnknownExecutor(
            f"unknown executor {executor!r}; available: {', '.join(sorted(EXECUTORS))}"
        ) from None


def loader(executor: str) -> Callable:
    return spec(executor).loader


def program_executors() -> list[str]:
    """The executors that run kernel programs (what `program_executor` accepts)."""
    return [n for n, s in EXECUTORS.items() if s.runs_programs]


def program_executor(executor: str) -> type:
    """The kernel-program executor class of `executor` (ValueError for whole-graph executors)."""
    s = spec(executor)
    if not s.runs_programs:
        raise ValueError(f"executor {executor!r} runs whole graphs, not kernel programs; "
                         f"choose from {', '.join(program_executors())}")
    return s.executor


def preemptible_executor(gpu: bool) -> str:
    """The first preemptible executor for a GPU (or a CPU) vGPU."""
    return next(n for n, s in EXECUTORS.items() if s.preemptible and s.gpu == gpu)


def resolve_executor(executor: str, vgpus) -> str:
    """What `auto` means on these vGPUs: our CUDA kernels on GPUs where CuPy works, onnxruntime
    (the fast whole-graph CPU path) on CPU vGPUs; any other name as given."""
    if executor != AUTO:
        return executor
    gpu = preemptible_executor(gpu=True)
    on_gpu = any(v.kind != "cpu" for v in vgpus)
    return gpu if on_gpu and probe_executors()[gpu]["available"] else DEFAULT_EXECUTOR


def probe_executors() -> dict[str, dict]:
    """What each executor can use here: {"numpy": {"available": True, "version": ...}, ...}.
    Never raises: a missing or broken backend is reported with its reason."""
    out = {}
    for name, s in EXECUTORS.items():
        try:
            out[name] = {"available": True, **s.probe()}
        except Exception as exc:  # any failure is a reason to report, not to crash `atoll info`
            out[name] = {"available": False, "reason": f"{type(exc).__name__}: {exc}".strip()}
    return out
