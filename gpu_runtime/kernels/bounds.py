"""How long one block of a kernel can run between two looks at the preemption flag on an H100: a
flag set while the block runs stops it only at its next check, so this bounds how long a
real-time arrival waits for the SMs best-effort blocks hold.

Each kernel factory registers, per variant, the stretches of one block of a launch between checks
(launch -> first check, check -> check, last check -> end) as the global bytes it moves, the flops
it does and its chain of dependent global loads. `seconds` turns a stretch into time: the longest
of the SM draining its resident blocks' stretches at their share of HBM bandwidth or arithmetic,
and the chain's latency. The model and its H100 figures: docs/gpu-acceptance.md, "Bounded blocks".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from gpu_runtime.program import BufferRef, Launch

BOUND_US = 10.0  # the longest a block may run between checks
SMS = 132
HBM_BYTES_S = 3.0e12  # device-to-device copy measured on the lent H100 (read + write)
FP32_FLOPS_SM = 128 * 2 * 1.755e9  # 128 FMA lanes at the 1.755 GHz boost clock
TENSOR_FLOPS_SM = 0.5 * 989e12 / SMS  # mma.sync taken at half the dense fp16 peak
LATENCY_S = 0.5e-6  # one dependent global load round trip under load (~880 cycles)
THREADS_SM, REGISTERS_SM, SHARED_SM, BLOCKS_SM = 2048, 65536, 228 * 1024, 32


@dataclass(frozen=True)
class Stretch:
    """The work of one block between two flag checks."""

    bytes: float
    flops: float
    chain: int
    tensor: bool = False  # flops on tensor cores


StretchFn = Callable[[Launch], tuple[Stretch, ...]]  # every stretch of one block
STRETCHES: dict[str, StretchFn] = {}


def register(name: str, fn: StretchFn) -> None:
    STRETCHES[name] = fn


def ints(launch: Launch) -> list[int]:
    """The launch's scalar arguments in order (buffers left out)."""
    return [a for a in launch.args if not isinstance(a, BufferRef)]


def trips(n: int, step: int) -> int:
    return max(1, -(-int(n) // int(step)))


def resident(launch: Launch) -> int:
    """Blocks of this launch sharing one SM."""
    threads = math.prod(launch.block)
    regs = -(-launch.kernel.registers // 8) * 8 * threads
    smem = launch.kernel.shared_bytes + launch.shared_bytes
    fit = min(THREADS_SM // threads, REGISTERS_SM // regs, SHARED_SM // max(smem, 1), BLOCKS_SM)
    return max(1, min(fit, trips(math.prod(launch.grid), SMS)))


def seconds(launch: Launch, s: Stretch) -> float:
    share = resident(launch)
    rate = TENSOR_FLOPS_SM if s.tensor else FP32_FLOPS_SM
    return max(share * s.bytes * SMS / HBM_BYTES_S, share * s.flops / rate, s.chain * LATENCY_S)


def longest_us(launch: Launch) -> float:
    """The longest stretch between flag checks of one block of `launch`, in microseconds."""
    fn = STRETCHES.get(launch.kernel.name)
    if fn is None:
        raise KeyError(f"{launch.kernel.name} registered no stretch model")
    return max(seconds(launch, s) for s in fn(launch)) * 1e6


@dataclass
class Row:
    kernel: str
    us: float
    where: str  # the program whose launch gave the longest stretch
    launches: int


def report(programs) -> list[Row]:
    """Per kernel, the longest stretch over every launch of `programs` ((key, Program) pairs),
    longest first."""
    rows: dict[str, Row] = {}
    for key, program in programs:
        for launch in program.launches:
            us = longest_us(launch)
            row = rows.setdefault(launch.kernel.name, Row(launch.kernel.name, us, key, 0))
            row.launches += 1
            if us > row.us:
                row.us, row.where = us, key
    return sorted(rows.values(), key=lambda r: -r.us)
