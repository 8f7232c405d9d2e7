"""Tensors across processes through POSIX shared memory, one segment per request and direction.

Only a small layout (name, dtype, shape, offset per tensor) travels through the control pipe; the
bytes are written once into the segment and read once out of it. Segment names are chosen by the
pool, so the pool can unlink a segment even when the worker that created it died before saying so.
"""

from __future__ import annotations

from multiprocessing import shared_memory

import numpy as np

ALIGN = 64  # cache-line alignment for every tensor in a segment

Layout = list[tuple[str, str, tuple[int, ...], int]]  # (name, dtype, shape, byte offset)


def plan(arrays: dict[str, np.ndarray]) -> tuple[Layout, int]:
    layout: Layout = []
    offset = 0
    for name, array in arrays.items():
        layout.append((name, array.dtype.str, tuple(array.shape), offset))
        offset += -(-array.nbytes // ALIGN) * ALIGN
    return layout, offset


def write(segment: str, arrays: dict[str, np.ndarray]) -> Layout:
    """Create segment `segment` holding `arrays`; the caller (or the pool) unlinks it."""
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    layout, size = plan(arrays)
    shm = shared_memory.SharedMemory(name=segment, create=True, size=max(size, 1))
    try:
        for (name, _dtype, _shape, offset), array in zip(layout, arrays.values()):
            _view(shm, array.dtype, array.shape, offset)[...] = array
    finally:
        shm.close()
    return layout


def read(segment: str, layout: Layout) -> dict[str, np.ndarray]:
    """Copy the tensors out of `segment` (which stays; see `unlink`)."""
    shm = shared_memory.SharedMemory(name=segment)
    try:
        return {name: _view(shm, dtype, shape, offset).copy() for name, dtype, shape, offset in layout}
    finally:
        shm.close()


class Mapped:
    """Zero-copy views of a segment's tensors, valid inside the `with` block. The caller must drop
    its references to the views before the block ends, or the mapping stays until collected."""

    def __init__(self, segment: str, layout: Layout):
        self._shm = shared_memory.SharedMemory(name=segment)
        self.arrays = {
            name: _view(self._shm, dtype, shape, offset) for name, dtype, shape, offset in layout
        }

    def __enter__(self) -> dict[str, np.ndarray]:
        return self.arrays

    def __exit__(self, *exc) -> None:
        self.arrays = {}  # views must go before the mapping can close
        try:
            self._shm.close()
        except BufferError:  # a view survives (e.g. in a traceback); the GC unmaps it later
            pass


def unlink(segment: str) -> bool:
    """Remove a segment by name; False if it was already gone."""
    try:
        shm = shared_memory.SharedMemory(name=segment)
    except FileNotFoundError:
        return False
    shm.close()
    shm.unlink()
    return True


def _view(shm, dtype, shape, offset) -> np.ndarray:
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(shm.buf, dtype=dtype, count=count, offset=offset).reshape(shape)
