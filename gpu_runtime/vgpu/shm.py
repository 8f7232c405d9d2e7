"""Tensors across processes through POSIX shared memory.

Only a small layout (name, dtype, shape, offset per tensor) travels through the control pipe; the
bytes are written once into a segment and read once out of it. Segments are reused: touching fresh
shared pages costs a page fault per 4 KiB in each process (tens of milliseconds for one batch of
images), so the pool keeps a cache of mapped segments per worker and the worker keeps its mappings
open until the pool tells it to forget one. Segment names are chosen by the pool, so it can unlink
every segment, including one a worker created just before dying.
"""

from __future__ import annotations

import math
import os
import secrets
import threading
from collections import OrderedDict
from multiprocessing import shared_memory

import ml_dtypes  # noqa: F401 - registers bfloat16, so a layout's "bfloat16" names its dtype
import numpy as np

ALIGN = 64  # cache-line alignment for every tensor in a segment
MIN_SEGMENT = 64 << 10
# Every segment a server makes (worker-pool segments, slot arenas) starts so; clients may name
# none of them as a shared-memory region (atoll/kserve/shm_registry.py).
SEGMENT_PREFIX = "atoll-"


def segment_prefix() -> str:
    """A prefix for one owner's segments: this process, and a random part, as a pid is reused."""
    return f"{SEGMENT_PREFIX}{os.getpid()}-{secrets.token_hex(3)}"

Layout = list[tuple[str, str, tuple[int, ...], int]]  # (name, dtype, shape, byte offset)
STRINGS = np.dtype(object).str  # a string tensor's dtype in a layout: its elements length-prefixed


def _element(e) -> bytes:
    if isinstance(e, bytes):
        return e
    if isinstance(e, str):
        return e.encode()
    raise ValueError(f"a string tensor holds bytes or str, not {type(e).__name__}")


def packed_strings(elements) -> bytes:
    """String elements (bytes, or str as UTF-8) as KServe's binary form lays them out: each a
    4-byte little-endian length, then its bytes."""
    parts = [_element(e) for e in elements]
    return b"".join(len(part).to_bytes(4, "little") + part for part in parts)


def strings_at(buf, offset: int, count: int) -> list[bytes]:
    """The `count` elements `packed_strings` laid out from byte `offset` of `buf`."""
    view, out = memoryview(buf), []
    for _ in range(count):
        n = int.from_bytes(view[offset : offset + 4], "little")
        out.append(bytes(view[offset + 4 : offset + 4 + n]))
        offset += 4 + n
    return out


def _nbytes(array: np.ndarray) -> int:
    if array.dtype == object:
        return sum(4 + len(_element(e)) for e in array.reshape(-1))
    return array.nbytes


def _tag(dtype: np.dtype) -> str:
    """A dtype as a layout names it: NumPy's code ('<f4'), or the name of an ml_dtypes type such
    as bfloat16, whose code ('<V2') would read back as raw bytes."""
    return dtype.name if dtype.kind == "V" else dtype.str


def plan(arrays: dict[str, np.ndarray]) -> tuple[Layout, int]:
    """Where each array lies in a segment (a string tensor, dtype object, packed: `packed_strings`),
    and the bytes they take."""
    layout: Layout = []
    offset = 0
    for name, array in arrays.items():
        layout.append((name, _tag(array.dtype), tuple(array.shape), offset))
        offset += -(-_nbytes(array) // ALIGN) * ALIGN
    return layout, offset


def views(buf, layout: Layout) -> dict[str, np.ndarray]:
    """Zero-copy arrays over a mapped segment (string tensors are read out: object arrays of bytes)."""
    out = {}
    for name, dtype, shape, offset in layout:
        count = math.prod(shape)
        if dtype == STRINGS:
            out[name] = np.empty(count, object)
            out[name][:] = strings_at(buf, offset, count)
            out[name] = out[name].reshape(shape)
        else:
            out[name] = np.frombuffer(buf, dtype=np.dtype(dtype), count=count, offset=offset).reshape(shape)
    return out


def store(buf, arrays: dict[str, np.ndarray]) -> Layout:
    """Copy `arrays` into a mapped segment (which must be large enough); returns their layout."""
    layout, _ = plan(arrays)
    for name, dtype, shape, offset in layout:
        if dtype == STRINGS:
            data = packed_strings(arrays[name].reshape(-1))
            memoryview(buf)[offset : offset + len(data)] = data
        else:
            np.frombuffer(buf, np.dtype(dtype), math.prod(shape), offset).reshape(shape)[...] = arrays[name]
    return layout


def write(segment: str, arrays: dict[str, np.ndarray]) -> Layout:
    """Create a one-off segment `segment` holding `arrays`; the caller (or the pool) unlinks it."""
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    _, size = plan(arrays)
    shm = shared_memory.SharedMemory(name=segment, create=True, size=max(size, 1))
    try:
        return store(shm.buf, arrays)
    finally:
        shm.close()


def read(segment: str, layout: Layout) -> dict[str, np.ndarray]:
    """Copy the tensors out of a one-off segment (which stays; see `unlink`)."""
    shm = shared_memory.SharedMemory(name=segment)
    try:
        return {k: v.copy() for k, v in views(shm.buf, layout).items()}
    finally:
        shm.close()


def unlink(segment: str) -> bool:
    """Remove a segment by name; False if it was already gone."""
    try:
        shm = shared_memory.SharedMemory(name=segment)
    except FileNotFoundError:
        return False
    shm.close()
    shm.unlink()
    return True


class SegmentCache:
    """The pool's reusable segments for one worker. `acquire` hands out a free segment at least as
    large as asked (or creates one, sized to a power of two); `release` returns it and evicts the
    least recently used free segments beyond `max_free_bytes`, returning their names so the worker
    can unmap them too."""

    def __init__(self, prefix: str, max_free_bytes: int = 256 << 20):
        self.prefix = prefix
        self.max_free_bytes = max_free_bytes
        self._lock = threading.Lock()
        self._count = 0
        self._free: OrderedDict[str, shared_memory.SharedMemory] = OrderedDict()
        self._used: dict[str, shared_memory.SharedMemory] = {}

    def acquire(self, nbytes: int) -> shared_memory.SharedMemory:
        with self._lock:
            fits = [s for s in self._free.values() if s.size >= nbytes]
            if fits:
                shm = min(fits, key=lambda s: s.size)
                del self._free[segment_name(shm)]
            else:
                size = max(MIN_SEGMENT, 1 << max(0, nbytes - 1).bit_length())
                self._count += 1
                shm = shared_memory.SharedMemory(f"{self.prefix}-{self._count}", create=True, size=size)
            self._used[segment_name(shm)] = shm
            return shm

    def release(self, shm: shared_memory.SharedMemory) -> list[str]:
        with self._lock:
            self._free[segment_name(shm)] = self._used.pop(segment_name(shm))
            evicted = []
            while sum(s.size for s in self._free.values()) > self.max_free_bytes:
                name, old = self._free.popitem(last=False)
                _drop(old)
                evicted.append(name)
            return evicted

    def close(self) -> None:
        with self._lock:
            for shm in [*self._free.values(), *self._used.values()]:
                _drop(shm)
            self._free.clear()
            self._used.clear()


class Attachments:
    """A worker's open mappings of the pool's segments, kept until the pool says to forget one."""

    def __init__(self):
        self._open: dict[str, shared_memory.SharedMemory] = {}
        self._lock = threading.Lock()  # inputs are mapped by one thread, outputs by another

    def buf(self, name: str):
        with self._lock:
            if name not in self._open:
                self._open[name] = shared_memory.SharedMemory(name=name)
            return self._open[name].buf

    def forget(self, name: str) -> None:
        with self._lock:
            shm = self._open.pop(name, None)
        if shm is not None:
            try:
                shm.close()
            except BufferError:  # a view still exists somewhere; the GC unmaps it later
                pass


def segment_name(shm: shared_memory.SharedMemory) -> str:
    return shm.name.lstrip("/")


def _drop(shm: shared_memory.SharedMemory) -> None:
    shm.close()
    try:
        shm.unlink()
    except FileNotFoundError:
        pass
