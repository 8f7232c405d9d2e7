"""Where a model's `instance_group` (`atoll.repository.instances`) puts its executor instances:
{vGPU id: instances there}. Triton's GPUs are Atoll's GPU vGPUs (MIG slices, green contexts, whole
GPUs), numbered for `gpus` in the server's order of them; Triton's CPU is Atoll's CPU vGPUs, a
KIND_CPU group's `count` spread over them in turn. A group that names what this server lacks is
refused at load."""

from __future__ import annotations

from collections import Counter

from batching.factory import DEFAULT_BATCHER
from gpu_runtime.vgpu.discovery import VGpuInfo

from atoll.repository.specs import ModelSpec


PLACING_BATCHER = DEFAULT_BATCHER  # PREBA: each model's batches go to its own vGPUs (ModelBatching.vgpus)


class InstancePlacementError(ValueError):
    pass


def place_instances(spec: ModelSpec, vgpus: list[VGpuInfo]) -> dict[str, int] | None:
    """The instances per vGPU; None without `instance_group` (every vGPU, as many batches at once
    as it runs)."""
    if not spec.instance_groups:
        return None
    gpus = [v for v in vgpus if v.kind != "cpu"]
    cpus = [v for v in vgpus if v.kind == "cpu"]
    counts: Counter[str] = Counter()
    for index, group in enumerate(spec.instance_groups):
        where = f"{spec.name}: instance_group {index} ({group.kind})"
        on_gpu = group.kind == "KIND_GPU" or (group.kind == "KIND_AUTO" and gpus)
        if on_gpu:
            if not gpus:
                raise InstancePlacementError(f"{where} needs a GPU; this server has CPU vGPUs only")
            beyond = [n for n in group.gpus if n >= len(gpus)]
            if beyond:
                raise InstancePlacementError(f"{where}: gpus {beyond} beyond this server's GPU vGPUs "
                                             f"0..{len(gpus) - 1} ({', '.join(v.id for v in gpus)})")  # fmt: skip
            for vgpu in [gpus[n] for n in group.gpus] or gpus:
                counts[vgpu.id] += group.count
            continue
        if not cpus:
            raise InstancePlacementError(f"{where} needs the CPU; this server has no CPU vGPU (vgpus.cpu_vgpus)")
        for n in range(group.count):
            counts[cpus[n % len(cpus)].id] += 1
    return dict(counts)


def restricted_vgpus(model: str, instances: dict[str, int] | None, every: list[str],
                     batcher: str) -> tuple[str, ...] | None:
    """The vGPUs the model's batches may go to when its instances leave some vGPU out (None: every
    one). Only PREBA places per model; the baseline batchers place every model on every vGPU."""
    if instances is None or set(instances) == set(every):
        return None
    if batcher != PLACING_BATCHER:
        raise InstancePlacementError(f"{model}: instance_group places it on {', '.join(instances)} only, and the "
                                     f"{batcher} batcher places every model on every vGPU "
                                     f"(batching.batcher={PLACING_BATCHER} places each model on its own)")  # fmt: skip
    return tuple(v for v in every if v in instances)
