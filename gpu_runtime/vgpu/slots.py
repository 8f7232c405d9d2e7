"""Slot arenas: shared memory where a request's input row is made and its output row is left.

A front end owns one arena per model, `count` slots of fixed size. A slot's input region holds one
row, written in place by whatever makes it (CPU preprocessing, the DPU driver, the request parser);
the vGPU worker copies it into its batch (or, for rows in consecutive slots, runs them where they
are) and writes that row's outputs into the slot's output region. Input regions are packed back to
back so consecutive rows already form a batch. The geometry is in a small header, so a worker maps
an arena from its name alone and keeps it mapped.
"""

from __future__ import annotations

import math
from multiprocessing import shared_memory

import numpy as np

from gpu_runtime.vgpu.messages import RowInput
from gpu_runtime.vgpu.shm import ALIGN, packed_strings, strings_at

HEADER = 4096  # the geometry, then the input regions from the next page
_GEOMETRY = np.dtype([("count", "<i8"), ("in_stride", "<i8"), ("out_stride", "<i8")])


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def row_layout(inputs, dim_bound: int, bytes_room: int = 0) -> tuple[tuple[RowInput, ...], int]:
    """Every input of a request in one slot row: `inputs` as (name, dims, numpy dtype), each at an
    aligned offset with room for its dims, a -1 taking up to `dim_bound` (a BYTES input, dtype
    object, has `bytes_room` bytes, its length prefixes included); and the row's bytes."""
    out, offset = [], 0
    for name, dims, dtype in inputs:
        dtype = np.dtype(dtype)
        elements = math.prod(dim_bound if d == -1 else d for d in dims)
        room = _aligned(bytes_room if dtype == object else elements * dtype.itemsize)
        out.append(RowInput(name, tuple(dims), dtype, offset, room))
        offset += room
    return tuple(out), max(offset, 1)


def pack_bytes(elements, region: np.ndarray) -> None:
    """BYTES elements into a row's region (uint8) as KServe's binary form lays them out: each a
    4-byte little-endian length, then its bytes. Raises ValueError past the region's room."""
    data = packed_strings(elements)
    if len(data) > len(region):
        raise ValueError(f"{len(data)} bytes of BYTES elements exceed the row's room of {len(region)}")
    region[: len(data)] = np.frombuffer(data, np.uint8)


def unpack_bytes(region: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The elements `pack_bytes` wrote, as an object array of `shape` holding str (onnxruntime's
    string tensors take UTF-8 text)."""
    out = np.empty(math.prod(shape), object)
    out[:] = [e.decode("utf-8", errors="replace") for e in strings_at(region, 0, len(out))]
    return out.reshape(shape)


class SlotArena:
    def __init__(self, shm: shared_memory.SharedMemory, owner: bool):
        self._shm = shm
        self.owner = owner
        self.name = shm.name.lstrip("/")
        geometry = np.frombuffer(shm.buf, _GEOMETRY, count=1)[0]
        self.count, self.in_stride, self.out_stride = (int(geometry[k]) for k in _GEOMETRY.names)
        self._outputs = HEADER + self.count * self.in_stride
        self._inputs = np.frombuffer(shm.buf, np.uint8, count=self.count * self.in_stride, offset=HEADER)

    @classmethod
    def create(cls, name: str, count: int, in_bytes: int, out_bytes: int) -> SlotArena:
        """A new arena of `count` slots; pages are only backed once touched."""
        if count < 1 or in_bytes < 1 or out_bytes < 0:
            raise ValueError(f"arena {name}: bad geometry ({count} slots, {in_bytes}/{out_bytes} bytes)")
        in_stride, out_stride = _aligned(in_bytes), _aligned(out_bytes)
        size = HEADER + count * (in_stride + out_stride)
        shm = shared_memory.SharedMemory(name=name, create=True, size=size)
        np.frombuffer(shm.buf, _GEOMETRY, count=1)[0] = (count, in_stride, out_stride)
        return cls(shm, owner=True)

    @classmethod
    def attach(cls, name: str) -> SlotArena:
        return cls(shared_memory.SharedMemory(name=name), owner=False)

    def input(self, index: int, shape: tuple[int, ...], dtype=np.float32, offset: int = 0) -> np.ndarray:
        """Slot `index`'s input region (from byte `offset`: one input of a row holding several) as an
        array of `shape` (a view: writes land in the slot, a scalar's too)."""
        return self.inputs(index, 1, shape, dtype, offset)[0, ...]

    def inputs(self, first: int, n: int, shape: tuple[int, ...], dtype=np.float32, offset: int = 0) -> np.ndarray:
        """Slots `first .. first+n-1` as one (n, *shape) array; they must be packed (see `packed`)."""
        dtype = np.dtype(dtype)
        row = math.prod(shape) * dtype.itemsize
        if (offset < 0 or offset + row > self.in_stride or first < 0 or first + n > self.count
                or (n > 1 and row != self.in_stride)):  # fmt: skip
            raise ValueError(f"arena {self.name}: slots {first}+{n} cannot hold rows of {shape} {dtype}")
        start = first * self.in_stride + offset
        return self._inputs[start : start + n * row].view(dtype).reshape((n, *shape))

    def packed(self, shape: tuple[int, ...], dtype=np.float32) -> bool:
        """Whether rows of `shape` fill their slots exactly, so consecutive slots form a batch."""
        return math.prod(shape) * np.dtype(dtype).itemsize == self.in_stride

    def output(self, index: int) -> memoryview:
        """Slot `index`'s output region (for shm.store / shm.views)."""
        if not 0 <= index < self.count:
            raise IndexError(f"arena {self.name} has no slot {index}")
        start = self._outputs + index * self.out_stride
        return self._shm.buf[start : start + self.out_stride]

    def close(self) -> None:
        """Unmap (and, for the owner, remove) the arena; views still alive keep their pages."""
        self._inputs = None
        try:
            self._shm.close()
        except BufferError:  # a view still exists somewhere (a batch's input): the mapping goes with the last
            # one. Let go of it here, or SharedMemory.__del__ tries again and prints the error.
            self._shm._buf = self._shm._mmap = None
            self._shm.close()  # its descriptor
        if self.owner:
            try:
                self._shm.unlink()
            except FileNotFoundError:
                pass
