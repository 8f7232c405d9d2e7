"""Shared-memory regions that clients register (Triton's system and CUDA shared-memory extensions).

A client on the same machine names a region, offset and size in place of a tensor's bytes: inputs
are read from the region straight into their slot, requested outputs written into it. Any front end
may take the next request, so a registration goes through the supervisor (`RegionBook`: names unique
across both kinds) to every front end (`Regions`) and is answered once all of them hold it. System
regions are POSIX objects mapped with mmap (`multiprocessing.shared_memory`'s tracker would unlink
the client's object); CUDA ones cudaIpcMemHandle_t handles opened with CuPy (`CudaIpc`), copied to
and from the host. A system key must be one shm_open(3) name and none of the server's segments
(`SystemRegion`), its object a regular file, not followed through a link (docs/robustness.md).
"""

from __future__ import annotations

import errno
import functools
import mmap
import os
import stat
from dataclasses import dataclass

import numpy as np
from gpu_runtime.vgpu.shm import SEGMENT_PREFIX

from atoll.kserve.errors import ApiError, ErrorCode
from atoll.kserve.protocol import SharedMemoryRef, described, is_count

CUDA_IPC_HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)
SHM_DIR = "/dev/shm"  # where Linux keeps POSIX shared-memory objects (glibc's shm_open)
NAME_MAX = 255  # the longest name of one file, in bytes (limits.h)


def _check_count(value, field: str) -> None:
    """INVALID_ARG naming `field` unless `value` is a non-negative int (JSON's 8.5, "0" and true are not)."""
    if not is_count(value):
        raise ApiError(ErrorCode.INVALID_ARG, f"'{field}' must be a non-negative integer, not {described(value)}")


def _object_name(key) -> str:
    """The shared-memory object that `key` names, without its leading "/"; INVALID_ARG unless
    shm_open(3) would take `key` as one object's name (see the module's docstring)."""
    if not isinstance(key, str):
        raise ApiError(ErrorCode.INVALID_ARG, f"'key' must be a string, not {described(key)}")
    name = key.removeprefix("/")
    try:
        length = len(os.fsencode(name))
    except UnicodeEncodeError:  # a lone surrogate from JSON's "\ud800": no file has that name
        length = 0
    if not 0 < length <= NAME_MAX or "/" in name or "\0" in name or name in (".", ".."):
        raise ApiError(ErrorCode.INVALID_ARG, f"'key' {key[:300]!r} is not a shared memory object's name: "
                                              f"an optional leading '/', then 1 to {NAME_MAX} bytes with "
                                              "no '/' or NUL")  # fmt: skip
    if name.startswith(SEGMENT_PREFIX):
        raise ApiError(ErrorCode.INVALID_ARG, f"'key' {key!r}: names starting '{SEGMENT_PREFIX}' are "
                                              "the server's own shared memory")  # fmt: skip
    return name


@dataclass(frozen=True)
class SystemRegion:
    name: str
    key: str  # the shared-memory object, as the client named it for shm_open ("/name")
    offset: int  # where the region starts in the object
    byte_size: int
    kind = "system"

    def __post_init__(self):  # both transports build one: every check before anything is opened
        _object_name(self.key)
        _check_count(self.offset, "offset")
        _check_count(self.byte_size, "byte_size")

    def status(self) -> dict:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}


@dataclass(frozen=True)
class CudaRegion:
    name: str
    raw_handle: bytes  # the cudaIpcMemHandle_t's bytes
    device_id: int
    byte_size: int
    kind = "cuda"

    def __post_init__(self):
        if not isinstance(self.raw_handle, bytes) or len(self.raw_handle) != CUDA_IPC_HANDLE_BYTES:
            raise ApiError(ErrorCode.INVALID_ARG, "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
        _check_count(self.device_id, "device_id")
        _check_count(self.byte_size, "byte_size")

    def status(self) -> dict:
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}


# ---- changes the supervisor hands every front end (`channel.Apply`) ------------------------------


@dataclass(frozen=True)
class Register:
    region: SystemRegion | CudaRegion


@dataclass(frozen=True)
class Unregister:
    kind: str  # "system" | "cuda"
    name: str | None  # None: every region of the kind


class RegionBook:
    """The supervisor's list of registered regions: one namespace for both kinds."""

    def __init__(self):
        self._regions: dict[str, SystemRegion | CudaRegion] = {}

    def all(self) -> tuple[SystemRegion | CudaRegion, ...]:
        return tuple(self._regions.values())

    def add(self, region: SystemRegion | CudaRegion) -> None:
        if region.name in self._regions:
            raise ApiError(ErrorCode.ALREADY_EXISTS, f"shared memory region '{region.name}' already in manager")
        self._regions[region.name] = region

    def remove(self, change: Unregister) -> None:
        for name in _names(self._regions, change):
            del self._regions[name]

    async def handle(self, action: Register | Unregister, apply) -> None:
        """Register or unregister in every front end (`apply`: `control.FrontEnds.apply`); a region
        that some front end cannot map is unregistered again everywhere."""
        if isinstance(action, Unregister):
            self.remove(action)
            await apply(action)
            return
        self.add(action.region)
        try:
            await apply(action)
        except ApiError:
            undo = Unregister(action.region.kind, action.region.name)
            self.remove(undo)
            await apply(undo)
            raise


def _names(regions: dict, change: Unregister) -> list[str]:
    return [name for name, region in regions.items()
            if region.kind == change.kind and change.name in (None, name)]  # fmt: skip


# O_NOFOLLOW: a symlink in /dev/shm is refused (ELOOP), not followed; O_NONBLOCK: a FIFO put there
# does not hold the front end (it is then refused as no regular file)
_OPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _SystemMapping:
    """A region's mapping, and the object's descriptor kept open to check its size before each use:
    a client that shrinks its object after registering would otherwise kill the front end that
    touches the mapping past the new end (SIGBUS)."""

    def __init__(self, region: SystemRegion):
        path = os.path.join(SHM_DIR, _object_name(region.key))
        try:
            self._fd = os.open(path, _OPEN_FLAGS)
        except OSError as exc:
            if exc.errno == errno.ENOENT:  # Triton's answer (see the module's docstring)
                raise ApiError(ErrorCode.INTERNAL, f"Unable to open shared memory region: '{region.key}'") from None
            why = "a symbolic link" if exc.errno == errno.ELOOP else os.strerror(exc.errno)
            raise ApiError(ErrorCode.INVALID_ARG, f"Unable to open shared memory region '{region.key}': "
                                                  f"{why}") from None  # fmt: skip
        try:
            self._mmap = mmap.mmap(self._fd, _checked_size(os.fstat(self._fd), region))
        except BaseException:
            os.close(self._fd)
            raise
        self.region = region
        self._view = memoryview(self._mmap)[region.offset : region.offset + region.byte_size]

    def read(self, offset: int, size: int):
        self._still_held(offset + size)
        return self._view[offset : offset + size]

    def write(self, offset: int, data: np.ndarray) -> None:
        self._still_held(offset + data.nbytes)
        self._view[offset : offset + data.nbytes] = data.reshape(-1).view(np.uint8)

    def _still_held(self, end: int) -> None:
        """INVALID_ARG when the object no longer holds the region's first `end` bytes (an
        fstat: what is left is a client shrinking it between this and the copy)."""
        size = os.fstat(self._fd).st_size
        if self.region.offset + end > size:
            raise ApiError(ErrorCode.INVALID_ARG, f"shared memory object '{self.region.key}' shrank to {size} bytes "
                                                  f"after it was registered")  # fmt: skip

    def close(self) -> None:
        self._view.release()
        os.close(self._fd)
        try:
            self._mmap.close()
        except BufferError:  # a request still reads from it; the mapping goes with its last array
            pass


def _checked_size(info: os.stat_result, region: SystemRegion) -> int:
    """The object's size; INVALID_ARG unless it is a non-empty regular file of one link (a hard
    link could bring in a file from elsewhere on /dev/shm's filesystem) that holds the region."""
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        raise ApiError(ErrorCode.INVALID_ARG, f"'{region.key}' is not a shared memory object")
    if info.st_size == 0:
        raise ApiError(ErrorCode.INVALID_ARG, f"shared memory object '{region.key}' is empty")
    if region.offset + region.byte_size > info.st_size:
        raise ApiError(ErrorCode.INVALID_ARG, f"Invalid shared memory region: offset {region.offset} + byte_size "
                                              f"{region.byte_size} is beyond the {info.st_size} bytes of "
                                              f"'{region.key}'")  # fmt: skip
    return info.st_size


class CudaIpc:
    """CUDA IPC through CuPy, imported on the first CUDA region (a GPU server's front ends only)."""

    @functools.cached_property
    def cupy(self):
        import cupy  # optional: CuPy, GPU only

        return cupy

    def open(self, handle: bytes, device_id: int) -> int:
        with self.cupy.cuda.Device(device_id):
            return self.cupy.cuda.runtime.ipcOpenMemHandle(handle)

    def close(self, pointer: int, device_id: int) -> None:
        with self.cupy.cuda.Device(device_id):
            self.cupy.cuda.runtime.ipcCloseMemHandle(pointer)

    def to_host(self, pointer: int, device_id: int, out: np.ndarray) -> None:
        runtime = self.cupy.cuda.runtime
        with self.cupy.cuda.Device(device_id):
            runtime.memcpy(out.ctypes.data, pointer, out.nbytes, runtime.memcpyDeviceToHost)

    def from_host(self, pointer: int, device_id: int, data: np.ndarray) -> None:
        runtime = self.cupy.cuda.runtime
        with self.cupy.cuda.Device(device_id):
            runtime.memcpy(pointer, data.ctypes.data, data.nbytes, runtime.memcpyHostToDevice)


class _CudaMapping:
    def __init__(self, region: CudaRegion, ipc: CudaIpc):
        self.ipc, self.device = ipc, region.device_id
        try:
            self.pointer = ipc.open(region.raw_handle, region.device_id)
        except Exception as exc:  # CuPy's CUDARuntimeError names the cause
            raise ApiError(ErrorCode.INVALID_ARG, f"failed to register CUDA shared memory region "
                                                  f"'{region.name}': {exc}") from None  # fmt: skip

    def read(self, offset: int, size: int) -> np.ndarray:
        out = np.empty(size, np.uint8)
        self.ipc.to_host(self.pointer + offset, self.device, out)
        return out

    def write(self, offset: int, data: np.ndarray) -> None:
        self.ipc.from_host(self.pointer + offset, self.device, np.ascontiguousarray(data).reshape(-1))

    def close(self) -> None:
        self.ipc.close(self.pointer, self.device)


class Regions:
    """A front end's registered regions, mapped. `cuda` is None on a server without GPU vGPUs,
    which then refuses CUDA regions."""

    def __init__(self, cuda=None):
        self.cuda = cuda
        self._regions: dict[str, SystemRegion | CudaRegion] = {}
        self._maps: dict[str, _SystemMapping | _CudaMapping] = {}

    def apply(self, change: Register | Unregister) -> None:
        if isinstance(change, Unregister):
            for name in _names(self._regions, change):
                del self._regions[name]
                self._maps.pop(name).close()
            return
        region = change.region
        if isinstance(region, CudaRegion):
            if self.cuda is None:
                raise ApiError(ErrorCode.UNSUPPORTED, "CUDA shared memory needs GPU vGPUs; this server has none")
            mapping = _CudaMapping(region, self.cuda)
        else:
            mapping = _SystemMapping(region)
        self._regions[region.name], self._maps[region.name] = region, mapping

    def status(self, kind: str, name: str | None) -> list[dict]:
        found = [r.status() for r in self._regions.values() if r.kind == kind and name in (None, r.name)]
        if name is not None and not found:
            what = "system" if kind == "system" else "CUDA"
            raise ApiError(ErrorCode.NOT_FOUND, f"Unable to find {what} shared memory region: '{name}'")
        return found

    def read(self, ref: SharedMemoryRef):
        """An input's bytes (a view into a system region, a host copy of a CUDA one)."""
        return self.check(ref).read(ref.offset, ref.byte_size)

    def write(self, ref: SharedMemoryRef, data: np.ndarray, output: str) -> None:
        if data.nbytes > ref.byte_size:
            raise ApiError(ErrorCode.INTERNAL, f"shared memory size specified with the request for output "
                                               f"'{output}' ({ref.byte_size} bytes) should be at least "
                                               f"{data.nbytes} bytes to hold the results")  # fmt: skip
        self.check(ref).write(ref.offset, data)

    def check(self, ref: SharedMemoryRef):
        """The mapping `ref` lies in; an ApiError for an unknown region or a range outside it."""
        region = self._regions.get(ref.region)
        if region is None:
            raise ApiError(ErrorCode.NOT_FOUND, f"Unable to find shared memory region: '{ref.region}'")
        if ref.offset + ref.byte_size > region.byte_size:
            raise ApiError(ErrorCode.INVALID_ARG, f"Invalid offset + byte size for shared memory region: "
                                                  f"'{ref.region}'")  # fmt: skip
        return self._maps[ref.region]

    def close(self) -> None:
        for mapping in self._maps.values():
            mapping.close()
        self._regions.clear()
        self._maps.clear()
