"""Kernel programs: a model compiled for one batch size, as an ordered list of kernel launches.

This is the contract between the ONNX importer (which produces programs), the executors (which run
them kernel by kernel) and the REEF scheduler (which interleaves, preempts and pads them).

Kernels are idempotent (ARCHITECTURE §3): a launch reads its input buffers and writes only its
output buffers, so re-running any suffix of a program from its last completed launch yields the same
outputs. Every CUDA source begins with the preemption guard (`ATOLL_GUARD`), so a launch whose
flag is set when it starts returns at once without writing anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Union

import numpy as np

# The CUDA guard prologue. `atoll_preempt` points to a word in device memory (or host-mapped pinned
# memory); kernels that loop over tiles re-check it per tile. One thread per block reads the flag
# and the block leaves together: a read per thread costs a memory transaction per thread (over
# PCIe for a mapped flag, which made whole models 10-100x slower), and a block-uniform exit keeps
# later __syncthreads safe. So ATOLL_GUARD must be reached by every thread of the block.
GUARD_PROLOGUE = r"""
#define ATOLL_GUARD(flag) do { __shared__ int atoll_stop_; \
  if (threadIdx.x + threadIdx.y + threadIdx.z == 0) atoll_stop_ = *((volatile const int*)(flag)); \
  __syncthreads(); if (atoll_stop_) return; } while (0)
"""


@dataclass(frozen=True)
class KernelDef:
    """One kernel: its CUDA C source, its NumPy reference and its resource use (for occupancy)."""

    name: str
    cuda_source: str  # extern "C" __global__ <name>(const int* atoll_preempt, ...) with ATOLL_GUARD
    numpy_impl: Callable[..., None]  # numpy_impl(*args) writes its outputs in place
    registers: int = 32
    shared_bytes: int = 0


@dataclass(frozen=True)
class BufferSpec:
    """A tensor in the planned arena. `offset` is in bytes; dead temporaries share offsets."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name, e.g. "float32"
    offset: int
    role: str  # "input" | "output" | "weight" | "temp"
    alias_of: int | None = None  # index of the buffer whose bytes this one views (Reshape etc.)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class BufferRef:
    """A launch argument naming a buffer of the program by index into `Program.buffers`."""

    index: int


Arg = Union[BufferRef, int, float]


@dataclass(frozen=True)
class Launch:
    kernel: KernelDef
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[Arg, ...]
    writes: tuple[int, ...]  # buffer indices this launch writes (its outputs)
    shared_bytes: int = 0  # dynamic shared memory; a kernel's static use is KernelDef.shared_bytes


@dataclass
class Program:
    model: str
    batch: int
    buffers: list[BufferSpec]
    launches: list[Launch]
    inputs: dict[str, int]  # graph input name -> buffer index
    outputs: dict[str, int]  # graph output name -> buffer index
    weights: dict[int, np.ndarray] = field(default_factory=dict)  # buffer index -> constant data
    arena_bytes: int = 0
    # Weights live in their own region (offsets of role "weight" buffers index it), so programs of
    # one model at several batch sizes can share a single copy.
    weight_bytes: int = 0
    # Restore may re-run up to this many already-completed launches (REEF's c outstanding kernels):
    # the arena keeps every buffer a launch reads intact until this many launches after it.
    restore_window: int = 0

    def kernels(self) -> dict[str, KernelDef]:
        """The distinct kernels of the program by name (what an executor compiles once)."""
        return {launch.kernel.name: launch.kernel for launch in self.launches}

    def checked_inputs(self, inputs: dict[str, np.ndarray]) -> list[tuple[int, np.ndarray]]:
        """(buffer index, contiguous float32 array) per graph input; a missing input or a shape the
        program was not compiled for is refused before anything is written."""
        out = []
        for name, index in self.inputs.items():
            if name not in inputs:
                raise KeyError(f"missing input {name!r}")
            value = np.ascontiguousarray(inputs[name], np.float32)
            shape = tuple(self.buffers[index].shape)
            if value.shape != shape:
                raise ValueError(f"input {name!r}: shape {value.shape}, program expects {shape}")
            out.append((index, value))
        return out


class PreemptFlag(Protocol):
    """The guard's flag as the host sees it: set() makes every later launch start as a no-op."""

    def set(self) -> None: ...

    def clear(self) -> None: ...

    def is_set(self) -> bool: ...


class Executor(Protocol):
    """Runs programs launch by launch. `state` is whatever the executor needs (arena, streams)."""

    name: str
    preemptible: bool

    def new_flag(self) -> PreemptFlag: ...

    def load(self, program: Program, flag: PreemptFlag | None = None) -> Any:
        """Allocates the arena and uploads weights; launches of the returned state check `flag`
        (a fresh flag of the executor's kind when None; pass one flag to several states to preempt
        them together)."""

    def set_inputs(self, state: Any, inputs: dict[str, np.ndarray]) -> None: ...

    def launch(self, state: Any, index: int, stream: Any = None) -> None: ...

    def synchronize(self, state: Any, stream: Any = None) -> None: ...

    def outputs(self, state: Any) -> dict[str, np.ndarray]: ...
