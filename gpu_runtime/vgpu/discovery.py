"""vGPU discovery: which slices this machine offers, in the order ARCHITECTURE §7 prescribes.

MIG instances (through NVML) come first, else whole GPUs (optionally split into green-context SM
partitions), else CPU "vGPUs". Every vGPU carries the environment its worker process needs, so the
worker code is the same for all kinds. Kinds that are absent are reported with a reason, which
`atoll info` prints. Nothing here touches CUDA in the calling process except the green-context check,
which only runs when partitions are asked for.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass, field

from gpu_runtime import green_context

MODES = ("auto", "mig", "gpu", "cpu")


class VGpuUnavailable(RuntimeError):
    """A forced discovery mode found nothing of its kind; the message says why."""


@dataclass(frozen=True)
class VGpuInfo:
    id: str  # "mig0" | "gpu0" | "gpu0.gc1" | "cpu0"
    kind: str  # "mig" | "gpu" | "green_context" | "cpu"
    name: str  # e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "cpu"
    uuid: str | None  # "MIG-..." / "GPU-..." or None for CPU
    profile_kind: str  # key of knee profiles: "a100-1g.5gb", "h100", "h100-16sm", "cpu"
    sm_count: int | None  # streaming multiprocessors (CPU vGPUs: None)
    memory_bytes: int | None
    env: dict[str, str] = field(default_factory=dict)  # set in the worker before CUDA is touched
    threads: int | None = None  # CPU vGPUs: intra-op threads of the executor
    cpus: tuple[int, ...] = ()  # CPU vGPUs: cores the worker is pinned to
    green_context: tuple[int, int] | None = None  # (partition index, SMs per partition)


@dataclass
class Discovery:
    vgpus: list[VGpuInfo]
    absent: dict[str, str]  # kind -> why there is none of it here


def discover_vgpus(
    mode: str = "auto", cpu_vgpus: int | None = None, green_context_sms: int | None = None
) -> list[VGpuInfo]:
    return discover(mode, cpu_vgpus, green_context_sms).vgpus


def discover(
    mode: str = "auto", cpu_vgpus: int | None = None, green_context_sms: int | None = None
) -> Discovery:
    """Find vGPUs. `mode` forces a kind (raising VGpuUnavailable with the reason if there is none);
    `green_context_sms` splits each whole GPU into partitions of that many SMs."""
    if mode not in MODES:
        raise ValueError(f"unknown vGPU mode {mode!r}; expected one of {', '.join(MODES)}")
    absent: dict[str, str] = {}
    if mode in ("auto", "mig"):
        migs, why = _mig_instances()
        if migs:
            return Discovery(migs, absent)
        absent["mig"] = why
        if mode == "mig":
            raise VGpuUnavailable(f"no MIG instances: {why}")
    if mode in ("auto", "gpu"):
        gpus, why = _whole_gpus()
        if gpus and green_context_sms:
            parts, gc_why = _green_partitions(gpus, green_context_sms)
            if parts:
                return Discovery(parts, absent)
            if mode == "gpu":
                raise VGpuUnavailable(f"no green-context partitions: {gc_why}")
            absent["green_context"] = gc_why
        elif not green_context_sms:
            absent["green_context"] = "not requested (green_context_sms unset)"
        if gpus:
            return Discovery(gpus, absent)
        absent["gpu"] = why
        if mode == "gpu":
            raise VGpuUnavailable(f"no GPUs: {why}")
    return Discovery(_cpu_vgpus(cpu_vgpus), absent)


def _cpu_vgpus(count: int | None) -> list[VGpuInfo]:
    """One CPU vGPU per 2 cores (at least one); each is pinned to its own cores where they suffice."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(
        range(os.cpu_count() or 1)
    )
    n = count if count is not None else max(1, len(cores) // 2)
    if n < 1:
        raise ValueError(f"cpu_vgpus must be at least 1, got {n}")
    per = max(1, len(cores) // n)
    vgpus = []
    for i in range(n):
        mine = tuple(cores[i * per : (i + 1) * per]) if (i + 1) * per <= len(cores) else tuple(cores)
        vgpus.append(
            VGpuInfo(
                id=f"cpu{i}",
                kind="cpu",
                name="cpu",
                uuid=None,
                profile_kind="cpu",
                sm_count=None,
                memory_bytes=_total_memory(),
                # Hide GPUs so a CPU worker never grabs one by accident.
                env={"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": str(len(mine))},
                threads=len(mine),
                cpus=mine,
            )
        )
    return vgpus


def _total_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def _nvml():
    """pynvml, initialised, or raise with a reason."""
    try:
        pynvml = importlib.import_module("pynvml")
    except ImportError:
        raise RuntimeError("pynvml not installed (pip install nvidia-ml-py)") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses: no library, no driver, no permission
        raise RuntimeError(f"NVML unavailable: {_text(exc)}") from None
    return pynvml


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _family(gpu_name: str) -> str:
    """'NVIDIA A100-SXM4-40GB' -> 'a100', 'NVIDIA H100 80GB HBM3' -> 'h100'."""
    name = gpu_name.replace("NVIDIA", "")
    match = re.search(r"\b([A-Z]{1,2}\d{1,4}[A-Z]?)\b", name)
    return match.group(1).lower() if match else re.sub(r"\W+", "-", name.lower()).strip("-")


def _mig_instances() -> tuple[list[VGpuInfo], str]:
    try:
        nvml = _nvml()
    except RuntimeError as exc:
        return [], str(exc)
    try:
        found: list[VGpuInfo] = []
        mig_capable = False
        for d in range(nvml.nvmlDeviceGetCount()):
            parent = nvml.nvmlDeviceGetHandleByIndex(d)
            try:
                current, _pending = nvml.nvmlDeviceGetMigMode(parent)
            except nvml.NVMLError:  # not supported on this GPU
                continue
            mig_capable = True
            if current != nvml.NVML_DEVICE_MIG_ENABLE:
                continue
            family = _family(_text(nvml.nvmlDeviceGetName(parent)))
            for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
                try:
                    handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
                except nvml.NVMLError:  # this slot holds no instance
                    continue
                name = _text(nvml.nvmlDeviceGetName(handle))
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                profile = re.search(r"MIG\s+(\S+)", name)
                found.append(
                    VGpuInfo(
                        id=f"mig{len(found)}",
                        kind="mig",
                        name=name,
                        uuid=uuid,
                        profile_kind=f"{family}-{profile.group(1)}" if profile else family,
                        sm_count=nvml.nvmlDeviceGetAttributes(handle).multiprocessorCount,
                        memory_bytes=nvml.nvmlDeviceGetMemoryInfo(handle).total,
                        env={"CUDA_VISIBLE_DEVICES": uuid},
                    )
                )
        if found:
            return found, ""
        if mig_capable:
            return [], "MIG-capable GPU present but MIG mode is off or no instances are created"
        return [], "no MIG-capable GPU (or no GPU) visible to NVML"
    finally:
        nvml.nvmlShutdown()


def _whole_gpus() -> tuple[list[VGpuInfo], str]:
    try:
        nvml = _nvml()
    except RuntimeError as exc:
        return [], str(exc)
    try:
        gpus = []
        for d in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(d)
            name = _text(nvml.nvmlDeviceGetName(handle))
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            gpus.append(
                VGpuInfo(
                    id=f"gpu{d}",
                    kind="gpu",
                    name=name,
                    uuid=uuid,
                    profile_kind=_family(name),
                    sm_count=_sm_count(uuid),
                    memory_bytes=nvml.nvmlDeviceGetMemoryInfo(handle).total,
                    env={"CUDA_VISIBLE_DEVICES": uuid},
                )
            )
        return gpus, "" if gpus else "NVML reports no GPU"
    finally:
        nvml.nvmlShutdown()


def _sm_count(uuid: str) -> int | None:
    """NVML reports SM counts only for MIG handles; whole GPUs ask the CUDA driver (lazily)."""
    try:
        return green_context.device_sm_count(uuid)
    except Exception:  # no cuda-python / driver: the count is informative only
        return None


def _green_partitions(gpus: list[VGpuInfo], sms: int) -> tuple[list[VGpuInfo], str]:
    try:
        counts = [green_context.partition_count(gpu.uuid, sms) for gpu in gpus]
    except Exception as exc:  # cuda-python missing, driver < 12.4, or split refused
        return [], f"green contexts unavailable: {exc}"
    parts = []
    for gpu, n in zip(gpus, counts):
        for k in range(n):
            parts.append(
                VGpuInfo(
                    id=f"{gpu.id}.gc{k}",
                    kind="green_context",
                    name=f"{gpu.name} green context {sms} SMs",
                    uuid=gpu.uuid,
                    profile_kind=f"{gpu.profile_kind}-{sms}sm",
                    sm_count=sms,
                    memory_bytes=gpu.memory_bytes,
                    env=dict(gpu.env),
                    green_context=(k, sms),
                )
            )
    return parts, "" if parts else f"no GPU has {sms} SMs to spare"
