"""`vmm.VirtualPool`'s driver over host memory (the CUDA emulator's device memory): the same calls
as CUDA's virtual memory management, made with Linux's mmap, so the emulator runs the GPU's
residency path with the same stable addresses.

Physical chunks are pages of one memfd file (a chunk's handle is its offset there); a reserved
range is an inaccessible anonymous mapping (PROT_NONE), and mapping a chunk replaces part of it by
a shared mapping of the file at that offset (MAP_FIXED); unmapping puts the inaccessible mapping
back, so a stray access to an evicted model faults as it would on a GPU.
"""

from __future__ import annotations

import ctypes
import mmap
import os

import numpy as np

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
MAP_FAILED = ctypes.c_void_p(-1).value
PROT_NONE = 0
MAP_FIXED = 0x10  # Linux
MAP_NORESERVE = 0x4000  # Linux: a reservation commits no memory
GRANULARITY = 64 << 10  # a chunk: small enough for test-sized budgets, a multiple of any page size


class HostVmm:
    def __init__(self, granularity: int = GRANULARITY):
        self._granularity = granularity
        self._fd = os.memfd_create("atoll-residency-pool")
        self._size = 0
        self._free: list[int] = []  # released chunks' offsets, reused by `create`

    def granularity(self) -> int:
        return self._granularity

    def create(self, nbytes: int) -> int:
        if nbytes != self._granularity:
            raise ValueError("chunks are of the granularity")
        if self._free:
            return self._free.pop()
        offset = self._size
        self._size += nbytes
        os.ftruncate(self._fd, self._size)
        return offset

    def release(self, handle: int) -> None:
        self._free.append(handle)

    def reserve(self, nbytes: int) -> int:
        """A range aligned to the granularity, as CUDA's are: a larger one, trimmed."""
        g = self._granularity
        start = _mmap(None, nbytes + g, PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
        address = -(-start // g) * g
        if address > start:
            self.free(start, address - start)
        self.free(address + nbytes, start + g - address)
        return address

    def free(self, address: int, nbytes: int) -> None:
        if _libc.munmap(address, nbytes) != 0:
            raise OSError(ctypes.get_errno(), "munmap")

    def map(self, address: int, nbytes: int, handle: int) -> None:
        _mmap(address, nbytes, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | MAP_FIXED, self._fd, handle)

    def unmap(self, address: int, nbytes: int) -> None:
        _mmap(address, nbytes, PROT_NONE,
              mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0)

    def set_access(self, address: int, nbytes: int) -> None:
        """Mapped chunks are read-write already (mmap's protection)."""

    def array(self, address: int, nbytes: int) -> np.ndarray:
        return np.frombuffer((ctypes.c_uint8 * nbytes).from_address(address), np.uint8)

    def close(self) -> None:
        os.close(self._fd)


def _mmap(address, nbytes, prot, flags, fd, offset) -> int:
    out = _libc.mmap(address, nbytes, prot, flags, fd, offset)
    if out is None or out == MAP_FAILED:
        raise OSError(ctypes.get_errno(), "mmap")
    return out
