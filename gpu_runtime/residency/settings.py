"""What a vGPU worker is told about residency (picklable: it travels to spawned workers)."""

from __future__ import annotations

from dataclasses import dataclass

from typing import Any

from gpu_runtime.residency.manager import Residency, cpu_pool
from gpu_runtime.residency.transfer import CupyCopier, HostCopier, handoff_s
from gpu_runtime.residency.vmm import VirtualPool
from gpu_runtime.residency.vmm_cuda import CudaVmm
from gpu_runtime.residency.vmm_host import HostVmm

# A copy's fixed cost per group on a CPU vGPU's simulated link: a cudaMemcpyAsync and its event
# record are a few microseconds each on the host.
GROUP_OVERHEAD_S = 10e-6


@dataclass(frozen=True)
class ResidencySettings:
    """`budget_bytes`: the weights a CPU vGPU holds at once (0: no residency, every model loaded
    whole as before); `bandwidth`: bytes/s a switch is timed at on a CPU vGPU (0: the memcpy as it
    runs, e.g. into the CUDA emulator's device memory); `pinned`: models never evicted;
    `evict_real_time`: whether models that ran real-time work may be evicted."""

    budget_bytes: int = 0
    bandwidth: float = 12e9
    pinned: tuple[str, ...] = ()
    evict_real_time: bool = False

    def cpu_residency(self, vgpu: str, executor: Any = None) -> Residency | None:
        """A CPU vGPU's residency (pool allocated now, once), or None when it is off. An executor
        with device memory (the CUDA emulator) gets the GPU's virtual pool over host memory (its
        weights and arenas in the pool, at stable addresses); the numpy executor a byte array."""
        if self.budget_bytes <= 0:
            return None
        copier = HostCopier(self.bandwidth or None, GROUP_OVERHEAD_S if self.bandwidth else 0.0)
        # a group costs a CPU vGPU a thread hand-off too: measured, so a busy host plans fewer groups
        overhead = max(GROUP_OVERHEAD_S, handoff_s(copier))
        memory = getattr(executor, "memory", None)
        pool = VirtualPool(HostVmm(), self.budget_bytes) if memory is not None else cpu_pool(self.budget_bytes)
        return _placing(Residency(pool, copier, self.planned_bandwidth, overhead, vgpu, self.pinned,
                                  self.evict_real_time), memory)

    def gpu_residency(self, vgpu: str, executor: Any, memory_bytes: int | None) -> Residency | None:
        """A GPU vGPU's residency: the virtual pool's chunks made now, once (the budget, at most
        the slice's memory), pinned host images, the grouping planned at the PCIe bandwidth
        measured here; None when it is off."""
        if self.budget_bytes <= 0:
            return None
        nbytes = min(self.budget_bytes, memory_bytes) if memory_bytes else self.budget_bytes
        copier = CupyCopier()
        return _placing(Residency(VirtualPool(CudaVmm(), nbytes), copier, copier.bandwidth(), GROUP_OVERHEAD_S,
                                  vgpu, self.pinned, self.evict_real_time, image_allocate=copier.pinned),
                        executor.memory)

    @property
    def planned_bandwidth(self) -> float:
        """What the grouping and the batcher's switch estimate assume: the link as configured, or
        for an unthrottled memcpy a host memory's (~10 GB/s)."""
        return self.bandwidth or 10e9

    def switch_s(self, weight_bytes: int, groups: int) -> float:
        """A switch's transfer time as planned: the bytes over the link, a copy's overhead per group."""
        return weight_bytes / self.planned_bandwidth + groups * GROUP_OVERHEAD_S


def _placing(residency: Residency, memory: Any) -> Residency:
    """A virtual pool's residency places its models' regions in the executor's `memory`."""
    if residency.space is not None:
        memory.placer = residency.place
    return residency
