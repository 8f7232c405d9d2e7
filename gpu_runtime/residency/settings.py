"""What a vGPU worker is told about residency (picklable: it travels to spawned workers)."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_runtime.residency.manager import Residency, cpu_pool
from gpu_runtime.residency.transfer import HostCopier, handoff_s

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

    def cpu_residency(self, vgpu: str) -> Residency | None:
        """A CPU vGPU's residency (pool allocated now, once), or None when it is off."""
        if self.budget_bytes <= 0:
            return None
        copier = HostCopier(self.bandwidth or None, GROUP_OVERHEAD_S if self.bandwidth else 0.0)
        # a group costs a CPU vGPU a thread hand-off too: measured, so a busy host plans fewer groups
        overhead = max(GROUP_OVERHEAD_S, handoff_s(copier))
        return Residency(cpu_pool(self.budget_bytes), copier, self.planned_bandwidth, overhead, vgpu,
                         self.pinned, self.evict_real_time)

    @property
    def planned_bandwidth(self) -> float:
        """What the grouping and the batcher's switch estimate assume: the link as configured, or
        for an unthrottled memcpy a host memory's (~10 GB/s)."""
        return self.bandwidth or 10e9

    def switch_s(self, weight_bytes: int, groups: int) -> float:
        """A switch's transfer time as planned: the bytes over the link, a copy's overhead per group."""
        return weight_bytes / self.planned_bandwidth + groups * GROUP_OVERHEAD_S
