"""Shared-memory regions: system regions over real POSIX shared memory, CUDA regions over a
stand-in for CuPy's IPC calls (the real ones run in test_cuda_shm_gpu.py where a GPU is), the
supervisor's one namespace, and a registration some front end cannot map being undone everywhere."""

from __future__ import annotations

import asyncio
import base64
from multiprocessing import shared_memory

import numpy as np
import pytest

from atoll.kserve.errors import ApiError, ErrorCode
from atoll.kserve.protocol import SharedMemoryRef
from atoll.kserve.shm_registry import CudaRegion, RegionBook, Regions, Register, SystemRegion, Unregister


@pytest.fixture
def segment():
    shm = shared_memory.SharedMemory(create=True, size=4096)
    yield shm
    shm.close()
    shm.unlink()


def code_of(fn) -> ErrorCode:
    with pytest.raises(ApiError) as raised:
        fn()
    return raised.value.code


def test_system_region_reads_inputs_and_takes_outputs_in_place(segment):
    regions = Regions()
    regions.apply(Register(SystemRegion("r", "/" + segment.name, 1024, 2048)))  # the region: bytes 1024..3072
    segment.buf[1024 + 16 : 1024 + 32] = np.arange(4, dtype=np.float32).tobytes()
    view = regions.read(SharedMemoryRef("r", 16, 16))
    assert np.frombuffer(view, np.float32).tolist() == [0, 1, 2, 3]
    regions.write(SharedMemoryRef("r", 100, 8), np.array([7, 9], np.int32), "y")
    assert np.frombuffer(segment.buf[1124:1132], np.int32).tolist() == [7, 9]
    assert regions.status("system", None) == [{"name": "r", "key": "/" + segment.name, "offset": 1024,
                                               "byte_size": 2048}]  # fmt: skip
    del view
    assert code_of(lambda: regions.read(SharedMemoryRef("r", 2040, 16))) == ErrorCode.INVALID_ARG  # past its end
    assert code_of(lambda: regions.read(SharedMemoryRef("q", 0, 4))) == ErrorCode.NOT_FOUND
    assert code_of(lambda: regions.write(SharedMemoryRef("r", 0, 4), np.zeros(2, np.int32), "y")) == ErrorCode.INTERNAL
    assert code_of(lambda: regions.status("system", "q")) == ErrorCode.NOT_FOUND
    regions.apply(Unregister("system", None))
    assert regions.status("system", None) == []


def test_a_key_without_its_leading_slash_names_the_same_object(segment):
    """shm_open(3): the leading "/" is optional (Linux keeps "/name" as /dev/shm/name)."""
    regions = Regions()
    regions.apply(Register(SystemRegion("r", segment.name, 0, 4096)))
    segment.buf[:4] = b"abcd"
    assert bytes(regions.read(SharedMemoryRef("r", 0, 4))) == b"abcd"
    regions.close()


def test_regions_that_cannot_be_mapped(segment):
    """A missing object is INTERNAL, as Triton answers it (test_triton_protocol pins it); a region
    past the object's end is the client's error. More refusals: test_shm_hostile.py."""
    regions = Regions()
    assert code_of(lambda: regions.apply(Register(SystemRegion("r", "/atoll_no_such_key", 0, 8)))) == ErrorCode.INTERNAL
    too_big = SystemRegion("r", "/" + segment.name, 4000, 200)
    assert code_of(lambda: regions.apply(Register(too_big))) == ErrorCode.INVALID_ARG
    assert code_of(lambda: regions.apply(Register(CudaRegion("c", bytes(64), 0, 8)))) == ErrorCode.UNSUPPORTED
    assert code_of(lambda: CudaRegion("c", b"short", 0, 8)) == ErrorCode.INVALID_ARG
    for device_id, byte_size in (("0", 8), (-1, 8), (True, 8), (0, 8.5), (0, -8)):  # JSON's other types
        assert code_of(lambda: CudaRegion("c", bytes(64), device_id, byte_size)) == ErrorCode.INVALID_ARG


class FakeIpc:
    """Device memory as host bytearrays, addressed like CUDA pointers."""

    def __init__(self):
        self.memory = {0x1000: bytearray(256)}
        self.opened, self.closed = [], []

    def open(self, handle, device_id):
        self.opened.append((base64.b64encode(handle), device_id))
        return 0x1000

    def close(self, pointer, device_id):
        self.closed.append(pointer)

    def to_host(self, pointer, device_id, out):
        out[...] = np.frombuffer(self.memory[0x1000], np.uint8)[pointer - 0x1000 : pointer - 0x1000 + out.nbytes]

    def from_host(self, pointer, device_id, data):
        start = pointer - 0x1000
        self.memory[0x1000][start : start + data.nbytes] = data.tobytes()


def test_cuda_regions_copy_through_the_device():
    ipc = FakeIpc()
    regions = Regions(ipc)
    regions.apply(Register(CudaRegion("c", b"h" * 64, 1, 128)))
    assert ipc.opened == [(base64.b64encode(b"h" * 64), 1)]
    regions.write(SharedMemoryRef("c", 8, 8), np.array([1.5, 2.5], np.float32), "y")
    assert np.frombuffer(regions.read(SharedMemoryRef("c", 8, 8)), np.float32).tolist() == [1.5, 2.5]
    assert regions.status("cuda", None) == [{"name": "c", "device_id": 1, "byte_size": 128}]
    assert regions.status("system", None) == []
    regions.apply(Unregister("system", "c"))  # another kind's name: left alone
    assert regions.status("cuda", "c")
    regions.apply(Unregister("cuda", "c"))
    assert ipc.closed == [0x1000] and regions.status("cuda", None) == []


def test_one_namespace_and_a_failed_registration_is_undone_everywhere(segment):
    book = RegionBook()
    applied = []

    async def apply(change):
        applied.append(change)
        if isinstance(change, Register) and change.region.name == "bad":
            raise ApiError(ErrorCode.INTERNAL, "front end 1 cannot map it")

    async def go():
        await book.handle(Register(SystemRegion("r", "/" + segment.name, 0, 8)), apply)
        with pytest.raises(ApiError) as twice:
            await book.handle(Register(CudaRegion("r", bytes(64), 0, 8)), apply)  # names are shared by both kinds
        assert twice.value.code == ErrorCode.ALREADY_EXISTS
        with pytest.raises(ApiError):
            await book.handle(Register(SystemRegion("bad", "/" + segment.name, 0, 8)), apply)
        assert applied[-1] == Unregister("system", "bad")
        with pytest.raises(ApiError) as again:  # the name was given back: the same failure, not a duplicate
            await book.handle(Register(SystemRegion("bad", "/" + segment.name, 0, 8)), apply)
        assert again.value.code == ErrorCode.INTERNAL
        await book.handle(Unregister("system", None), apply)
        await book.handle(Register(SystemRegion("r", "/" + segment.name, 0, 8)), apply)  # free again

    asyncio.run(go())
