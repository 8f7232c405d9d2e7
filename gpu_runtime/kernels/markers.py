"""The cupy executor's two marker kernels, as KernelDefs so they come from the cubin cache
(`cubins`) like every program kernel, NVRTC being the fallback. The executor launches them itself,
one thread each, into the graphs it captures; no program lists them.

`atoll_progress(flag, word, value)` stores `value` in a host-mapped word unless the preemption flag
is set: ending a chunk graph, it proves the chunk ran with the flag clear. `atoll_stamp(word)`
stores 1: opening a program graph, it marks when the program got an SM.
"""

from __future__ import annotations

import numpy as np

from gpu_runtime.program import KernelDef


def _progress(flag: np.ndarray, word: np.ndarray, value: int) -> None:
    if not flag[0]:
        word[0] = value


def _stamp(word: np.ndarray) -> None:
    word[0] = 1


PROGRESS = KernelDef("atoll_progress", r"""
extern "C" __global__ void atoll_progress(const int* __restrict__ flag, int* word, int value) {
  if (!*((volatile const int*)flag)) { *((volatile int*)word) = value; __threadfence_system(); }
}
""", _progress)

STAMP = KernelDef("atoll_stamp", r"""
extern "C" __global__ void atoll_stamp(int* word) {
  *((volatile int*)word) = 1; __threadfence_system();
}
""", _stamp)

KERNELS = {k.name: k for k in (PROGRESS, STAMP)}
