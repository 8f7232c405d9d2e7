"""Kernel profiler: each launch's duration measured on the executor and its occupancy computed
from its resource use (registers, shared memory, block size) against the device's limits."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable

from gpu_runtime.program import KernelDef, Program


@dataclass(frozen=True)
class DeviceLimits:
    name: str
    max_threads_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int
    shared_bytes_per_sm: int
    register_alloc_unit: int = 256  # registers are granted per warp in units of this many
    reserved_shared_per_block: int = 1024  # the system's own shared memory per block (sm_80+)
    warp_size: int = 32

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size



def occupancy(block_threads: int, registers: int, shared_bytes: int, limits: DeviceLimits) -> float:
    """Fraction of an SM's warp slots a kernel can fill, limited by threads, registers and smem."""
    warps = math.ceil(block_threads / limits.warp_size)
    unit = limits.register_alloc_unit
    regs_per_warp = math.ceil(max(registers, 1) * limits.warp_size / unit) * unit
    by_regs = limits.registers_per_sm // (regs_per_warp * warps)
    by_threads = limits.max_warps_per_sm // warps
    by_smem = limits.shared_bytes_per_sm // (shared_bytes + limits.reserved_shared_per_block)
    blocks = min(by_regs, by_threads, by_smem, limits.max_blocks_per_sm)
    return blocks * warps / limits.max_warps_per_sm


@dataclass(frozen=True)
class KernelProfile:
    name: str
    duration_s: float
    blocks: int
    block_threads: int
    occupancy: float


def declared_resources(kernel: KernelDef) -> tuple[int, int]:
    return kernel.registers, kernel.shared_bytes


def profile_program(program: Program, time_launch: Callable[[int], float],
                    limits: DeviceLimits | None, reps: int = 3,
                    resources: Callable[[KernelDef], tuple[int, int]] = declared_resources,
                    ) -> list[KernelProfile]:
    """`time_launch(i)` runs launch i once on a loaded state and returns its duration in seconds;
    `resources(kernel)` gives (registers per thread, static shared bytes), on CUDA from the
    compiled kernel. Without `limits` (CPU vGPUs: a kernel owns a thread) every occupancy is 1."""
    out = []
    for i, launch in enumerate(program.launches):
        duration = statistics.median(time_launch(i) for _ in range(reps))
        threads = math.prod(launch.block)
        occ = 1.0
        if limits is not None:
            regs, static_shared = resources(launch.kernel)
            occ = occupancy(threads, regs, static_shared + launch.shared_bytes, limits)
        out.append(KernelProfile(launch.kernel.name, duration, math.prod(launch.grid), threads, occ))
    return out
