"""Tensors across processes through POSIX shared memory.

Only a small layout (name, dtype, shape, offset per tensor) travels through the control pipe; the
bytes are written once into a region (a slot arena's row, `slots.py`, or a one-off segment) and
read once out of it.
"""

from __future__ import annotations

import math
import os
import secrets
from multiprocessing import shared_memory

import ml_dtypes  # noqa: F401 - registers bfloat16, so a layout's "bfloat16" names its dtype
import numpy as np

ALIGN = 64  # cache-line alignment for every tensor in a segment
# Every segment a server makes (slot arenas, one-off outputs) starts so; clients may name
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
