"""`vmm.VirtualPool`'s driver on a GPU: CUDA's virtual memory management through the driver API
(libcuda, by ctypes: CuPy does not expose these calls). Every call below is documented in the CUDA
Driver API guide, "Virtual Memory Management"
(https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html):

- cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM): the size and
  alignment every create, reserve and map must be a multiple of (2 MB on current GPUs);
- cuMemCreate(&handle, size, &prop, 0): physical memory on the device, mapped nowhere yet
  (prop: CU_MEM_ALLOCATION_TYPE_PINNED on CU_MEM_LOCATION_TYPE_DEVICE, no shareable handle);
- cuMemAddressReserve(&address, size, alignment, 0, 0): a virtual range, no memory behind it;
- cuMemMap(address, size, 0, handle, 0): a whole handle at an address (the offset into the handle
  must be 0, so each pool chunk is a handle of its own);
- cuMemSetAccess(address, size, &desc, 1): read-write access for this device, on a range that is
  fully mapped (a new mapping has no access until this call);
- cuMemUnmap(address, size): the whole range of one mapping (never a sub-range, so `vmm` unmaps
  chunk by chunk); the range is a reservation again, to be mapped anew;
- cuMemRelease(handle), cuMemAddressFree(address, size).

Every call first makes the device's primary context (CuPy's) current on the calling thread
(cudaSetDevice): a switch is made on whichever worker thread admits the batch.
"""

from __future__ import annotations

import ctypes

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_HANDLE_TYPE_NONE = 0
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0


class CUmemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class CUmemAllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class CUmemAllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", CUmemLocation), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", CUmemAllocFlags)]


class CUmemAccessDesc(ctypes.Structure):
    _fields_ = [("location", CUmemLocation), ("flags", ctypes.c_int)]


class CudaVmmError(RuntimeError):
    pass


class CudaVmm:
    def __init__(self, device: int | None = None):
        import cupy  # optional: CuPy, GPU only (the arrays over mapped ranges, the context)

        self._cp = cupy
        device = cupy.cuda.Device().id if device is None else device
        self._device = device
        self._cu = ctypes.CDLL("libcuda.so.1")
        u64, size_t = ctypes.c_uint64, ctypes.c_size_t
        self._cu.cuMemGetAllocationGranularity.argtypes = (ctypes.POINTER(size_t), ctypes.POINTER(CUmemAllocationProp), ctypes.c_int)
        self._cu.cuMemCreate.argtypes = (ctypes.POINTER(u64), size_t, ctypes.POINTER(CUmemAllocationProp), u64)
        self._cu.cuMemAddressReserve.argtypes = (ctypes.POINTER(u64), size_t, size_t, u64, u64)
        self._cu.cuMemMap.argtypes = (u64, size_t, size_t, u64, u64)
        self._cu.cuMemSetAccess.argtypes = (u64, size_t, ctypes.POINTER(CUmemAccessDesc), size_t)
        self._cu.cuMemUnmap.argtypes = (u64, size_t)
        self._cu.cuMemRelease.argtypes = (u64,)
        self._cu.cuMemAddressFree.argtypes = (u64, size_t)
        location = CUmemLocation(CU_MEM_LOCATION_TYPE_DEVICE, device)
        self._prop = CUmemAllocationProp(CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_HANDLE_TYPE_NONE, location)
        self._access = CUmemAccessDesc(location, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        granularity = size_t(0)
        self._check("cuMemGetAllocationGranularity", ctypes.byref(granularity), ctypes.byref(self._prop),
                    CU_MEM_ALLOC_GRANULARITY_MINIMUM)
        self._granularity = granularity.value

    def _check(self, name: str, *args) -> None:
        self._cp.cuda.runtime.setDevice(self._device)
        result = getattr(self._cu, name)(*args)
        if result != 0:
            raise CudaVmmError(f"{name} failed: CUresult {result}")

    def granularity(self) -> int:
        return self._granularity

    def create(self, nbytes: int) -> int:
        handle = ctypes.c_uint64(0)
        self._check("cuMemCreate", ctypes.byref(handle), nbytes, ctypes.byref(self._prop), 0)
        return handle.value

    def release(self, handle: int) -> None:
        self._check("cuMemRelease", handle)

    def reserve(self, nbytes: int) -> int:
        address = ctypes.c_uint64(0)
        self._check("cuMemAddressReserve", ctypes.byref(address), nbytes, self._granularity, 0, 0)
        return address.value

    def free(self, address: int, nbytes: int) -> None:
        self._check("cuMemAddressFree", address, nbytes)

    def map(self, address: int, nbytes: int, handle: int) -> None:
        self._check("cuMemMap", address, nbytes, 0, handle, 0)

    def unmap(self, address: int, nbytes: int) -> None:
        self._check("cuMemUnmap", address, nbytes)

    def set_access(self, address: int, nbytes: int) -> None:
        self._check("cuMemSetAccess", address, nbytes, ctypes.byref(self._access), 1)

    def close(self) -> None:
        """Nothing of its own to free: the pool released its handles and ranges."""

    def array(self, address: int, nbytes: int):
        cp = self._cp
        return cp.ndarray((nbytes,), cp.uint8, cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(address, nbytes, self), 0))
