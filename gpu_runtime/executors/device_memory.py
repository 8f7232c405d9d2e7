"""Device memory of one executor on one vGPU: one copy of each distinct weight set, arenas shared by
programs that never run at once, what each model holds, and loads refused when they would not fit.

Programs of one model (batch sizes x length buckets x priorities) hold the same weights at the same
offsets (`Program.weight_bytes`), so a load whose weights equal, offset by offset, those of a region
already here uses that region. Loads made under `sharing(model, group)` take their arena from the
group's one region, sized by the largest program loaded into it (load the largest first: a larger
one later gets a new region, and the programs loaded before keep the old one): the caller promises
that programs of one group never run at once. Without a group a load gets an arena of its own.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_runtime.program import Program

MB = 1 << 20


class DeviceMemoryError(MemoryError):
    """A load that would not fit its vGPU; the message names the sizes."""


class Region:
    """One allocation of `nbytes` (`array`, bytes on the device), charged to `model` as `kind`
    ("weights" or "arena") while a state refers to it."""

    def __init__(self, array: Any, nbytes: int, model: str, kind: str):
        self.array, self.nbytes, self.model, self.kind = array, nbytes, model, kind


@dataclass
class _WeightSet:
    host: dict[tuple, np.ndarray]  # (offset, shape, dtype) -> the first program's weight data
    region: weakref.ref


class DeviceMemory:
    """`allocate(nbytes)` returns a device byte array; `capacity()` the bytes the vGPU offers this
    executor in all (what it holds plus what it may still take), `available()` what is still free."""

    def __init__(self, allocate: Callable[[int], Any], available: Callable[[], int],
                 capacity: Callable[[], int]):
        self.allocate, self.available, self.capacity = allocate, available, capacity
        self._weights: list[_WeightSet] = []
        self._arenas: dict[tuple, Region] = {}  # (model, group) -> its arena
        self._held: dict[tuple[str, str], int] = {}  # (model, kind) -> live bytes
        self._lock = threading.RLock()  # `available` may ask for held_bytes under it
        self._scope = threading.local()
        # residency's virtual pool (gpu_runtime/residency/manager.py `Residency.place`): regions of
        # the models it is loading, (model, group, program, arena_bytes, weights) -> regions or None
        self.placer: Callable | None = None

    def sharing(self, model: str, group: Hashable | None = None) -> "Sharing":
        """Loads in this thread inside `with` are charged to `model`; with a `group`, they share
        its arena."""
        return Sharing(self, model, group)

    def regions(self, program: Program, arena_bytes: int,
                weights: Region | None = None) -> tuple[Region, Region, bool]:
        """(weights, arena, whether the weights are new and must be uploaded) for `program`, whose
        arena needs `arena_bytes`; `weights` given are used as they are. DeviceMemoryError, with
        nothing allocated, if the new regions would not fit."""
        model, group = getattr(self._scope, "value", None) or (program.model, None)
        placed = self.placer(model, group, program, arena_bytes, weights) if self.placer else None
        if placed is not None:
            return placed
        key = (model, group) if group is not None else None
        with self._lock:
            weights = weights or self._find_weights(program)
            arena = self._arenas.get(key)
            if arena is not None and arena.nbytes < arena_bytes:
                arena = None
            need = (0 if weights else max(program.weight_bytes, 1)) + (0 if arena else max(arena_bytes, 1))
            self._check(model, program, need, arena_bytes)
            fresh = weights is None
            if fresh:
                weights = self._new(max(program.weight_bytes, 1), model, "weights")
                self._weights.append(_WeightSet(_weight_data(program), weakref.ref(weights)))
            if arena is None:
                arena = self._new(max(arena_bytes, 1), model, "arena")
                if key is not None:
                    self._arenas[key] = arena
            return weights, arena, fresh

    def held(self) -> dict[str, dict[str, int]]:
        """Live bytes per model: {"m": {"weights": .., "arena": .., "total": ..}}."""
        out: dict[str, dict[str, int]] = {}
        with self._lock:
            for (model, kind), nbytes in self._held.items():
                out.setdefault(model, {"weights": 0, "arena": 0})[kind] += nbytes
        for entry in out.values():
            entry["total"] = entry["weights"] + entry["arena"]
        return out

    def _find_weights(self, program: Program) -> Region | None:
        data = _weight_data(program)
        for ws in self._weights:
            region = ws.region()
            if region is not None and ws.host.keys() == data.keys() and all(
                    np.array_equal(ws.host[k], v) for k, v in data.items()):
                return region
        return None

    def _check(self, model: str, program: Program, need: int, arena_bytes: int) -> None:
        free = self.available()
        if need > free:
            held = sum(n for (m, _), n in self._held.items() if m == model)
            raise DeviceMemoryError(
                f"{model}: loading {program.model} needs {size(need)} more (weights {size(program.weight_bytes)}, "
                f"arena {size(arena_bytes)}) but the vGPU has {size(free)} free of {size(self.capacity())}; "
                f"the model holds {size(held)}")

    def _new(self, nbytes: int, model: str, kind: str) -> Region:
        region = Region(self.allocate(nbytes), nbytes, model, kind)
        self._held[model, kind] = self._held.get((model, kind), 0) + nbytes
        weakref.finalize(region, self._release, model, kind, nbytes)
        return region

    def _release(self, model: str, kind: str, nbytes: int) -> None:
        with self._lock:
            left = self._held.get((model, kind), 0) - nbytes
            if left > 0:
                self._held[model, kind] = left
            else:
                self._held.pop((model, kind), None)
            self._weights = [ws for ws in self._weights if ws.region() is not None]

    def held_bytes(self) -> int:
        with self._lock:
            return sum(self._held.values())


class Sharing:
    """The scope `DeviceMemory.sharing` opens (per thread; nests)."""

    def __init__(self, memory: DeviceMemory, model: str, group: Hashable | None):
        self._memory, self._value, self._outer = memory, (model, group), None

    def __enter__(self) -> None:
        self._outer = getattr(self._memory._scope, "value", None)
        self._memory._scope.value = self._value

    def __exit__(self, *exc) -> None:
        self._memory._scope.value = self._outer


def host_memory(capacity_bytes: int | None) -> DeviceMemory:
    """Memory of an executor whose device memory is host memory (the CUDA emulator): NumPy byte
    arrays, within `capacity_bytes` (None: the machine's physical memory)."""
    def capacity() -> int:
        return capacity_bytes if capacity_bytes is not None else _physical_bytes()

    memory = DeviceMemory(lambda n: np.zeros(n, np.uint8), lambda: capacity() - memory.held_bytes(), capacity)
    return memory


def buffer_views(program: Program, weights: Any, arena: Any,
                 upload: Callable[[Any, np.ndarray], None] | None) -> list:
    """Every buffer of `program` as a view into its region (a byte array, NumPy or CuPy) at its
    planned offset; `upload(view, data)` fills the weights when they are new."""
    views = []
    for i, spec in enumerate(program.buffers):
        region = weights if spec.role == "weight" else arena
        view = region[spec.offset:spec.offset + spec.nbytes].view(spec.dtype).reshape(spec.shape)
        if spec.role == "weight" and upload is not None and i in program.weights:
            upload(view, np.ascontiguousarray(program.weights[i], spec.dtype))
        views.append(view)
    return views


def size(nbytes: int) -> str:
    """Bytes as people read them in the messages: MB from a tenth of one, else bytes."""
    return f"{nbytes / MB:.1f} MB" if nbytes >= MB // 10 else f"{nbytes} bytes"


def _physical_bytes() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _weight_data(program: Program) -> dict[tuple, np.ndarray]:
    return {(b.offset, b.shape, b.dtype): program.weights[i] for i, b in enumerate(program.buffers)
            if b.role == "weight" and i in program.weights}
