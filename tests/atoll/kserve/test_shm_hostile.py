"""System shared-memory registrations from a hostile client: a key must be one POSIX shared-memory
name as shm_open(3) takes it (an optional leading "/", then 1..NAME_MAX bytes with no "/" or NUL,
not "." or ".."), must not name the server's own segments, and must open a regular file in /dev/shm
itself (no symlink, no hard link) that holds offset + byte_size. Each refusal is INVALID_ARG (HTTP
400, gRPC INVALID_ARGUMENT) and opens nothing; a missing object stays INTERNAL, as Triton answers
it. Over the HTTP and gRPC servers too, with a supervisor that maps in this process."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import grpc
import numpy as np
import pytest
from tests.atoll.front_end.test_server_errors import StuckFrontEnd
from tests.atoll.grpc_served import grpc_channel
from tests.atoll.http_served import http_served
from tritonclient.grpc import service_pb2 as pb

from atoll.front_end.endpoints import Endpoints
from atoll.kserve.errors import ApiError, ErrorCode
from atoll.kserve.protocol import SharedMemoryRef
from atoll.kserve.shm_registry import SEGMENT_PREFIX, SHM_DIR, Regions, Register, SystemRegion, Unregister
from atoll.observe.metrics import Metrics

SECRET = b"root:$6$not-in-dev-shm\n"


@pytest.fixture
def shm_dir():
    """Paths in /dev/shm named for this test alone, removed afterwards: `make(suffix)` gives one."""
    made = []

    def make(suffix: str = "") -> Path:
        made.append(Path(SHM_DIR, f"atoll_test_{uuid.uuid4().hex}{suffix}"))
        return made[-1]

    yield make
    for path in made:
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink(missing_ok=True)


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file outside /dev/shm that no registration may reach."""
    path = tmp_path / "victim.bin"
    path.write_bytes(SECRET)
    return path


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """Every path `os.open` is asked for while the test runs."""
    paths, real = [], os.open

    def spy(path, *args, **kw):
        paths.append(os.fsdecode(path))
        return real(path, *args, **kw)

    monkeypatch.setattr(os, "open", spy)
    return paths


def refusal(fn) -> ApiError:
    with pytest.raises(ApiError) as raised:
        fn()
    return raised.value


def register(key, offset=0, byte_size=8, regions=None):
    return (regions or Regions()).apply(Register(SystemRegion("r", key, offset, byte_size)))


def unchecked(key, offset=0, byte_size=8) -> SystemRegion:
    """A region that skipped `SystemRegion`'s checks, as one unpickled from the control channel
    does: the mapping checks the key again."""
    region = object.__new__(SystemRegion)
    for field, value in (("name", "r"), ("key", key), ("offset", offset), ("byte_size", byte_size)):
        object.__setattr__(region, field, value)
    return region


# shm_open(3) on Linux: a name is "/somename", one path component of at most NAME_MAX (255) bytes
HOSTILE_KEYS = {
    "traversal": "/../../tmp/probe/victim.bin",
    "absolute path made relative": "//tmp/x",
    "dot-dot": "..",
    "dot-dot after the slash": "/..",
    "dot": ".",
    "dot after the slash": "/.",
    "nested": "a/b",
    "nested after the slash": "/a/b",
    "trailing slash": "/a/",
    "NUL": "/a\0b",
    "empty": "",
    "only the slash": "/",
    "256 bytes": "/" + "a" * 256,
    "255 characters of 2 bytes": "/" + "é" * 255,
    "lone surrogate (JSON's \\ud800)": "/\ud800",
}


@pytest.mark.parametrize("key", HOSTILE_KEYS.values(), ids=HOSTILE_KEYS.keys())
def test_a_key_that_is_not_one_shm_name_is_refused_before_anything_opens(key, opened):
    assert refusal(lambda: register(key)).code == ErrorCode.INVALID_ARG
    assert refusal(lambda: Regions().apply(Register(unchecked(key)))).code == ErrorCode.INVALID_ARG
    assert opened == []


@pytest.mark.parametrize("key", [5, ["a"], None, b"/x", {"k": 1}], ids=repr)
def test_a_key_that_is_no_string_is_refused(key, opened):
    error = refusal(lambda: register(key))
    assert error.code == ErrorCode.INVALID_ARG and "'key' must be a string" in error.message
    assert opened == []


@pytest.mark.parametrize(("offset", "byte_size"), [("0", 8), (0, 8.5), (-100, 100), (100, -50), (True, 8),
                                                   (0, False), (None, 8), (0, [8]), (1.0, 8)])  # fmt: skip
def test_offset_and_byte_size_must_be_non_negative_integers(offset, byte_size, opened):
    error = refusal(lambda: register("/atoll_test_x", offset, byte_size))
    assert error.code == ErrorCode.INVALID_ARG and "must be a non-negative integer" in error.message
    assert opened == []


def test_the_traversal_leaves_the_file_outside_untouched(victim, opened):
    key = "/../.." + str(victim)  # what /dev/shm/<key> would reach without the check
    assert Path(SHM_DIR, key.lstrip("/")).resolve() == victim.resolve()
    assert refusal(lambda: register(key, 0, len(SECRET))).code == ErrorCode.INVALID_ARG
    assert opened == [] and victim.read_bytes() == SECRET


def test_a_symlink_in_dev_shm_is_not_followed(shm_dir, victim, opened):
    link = shm_dir()
    link.symlink_to(victim)
    error = refusal(lambda: register("/" + link.name, 0, len(SECRET)))
    assert error.code == ErrorCode.INVALID_ARG and "symbolic link" in error.message
    assert opened == [str(link)] and victim.read_bytes() == SECRET


def test_a_hard_link_directory_or_fifo_in_dev_shm_is_no_shm_object(shm_dir):
    target, link = shm_dir(), shm_dir()
    target.write_bytes(bytes(64))
    os.link(target, link)  # a hard link could bring in a file from elsewhere on /dev/shm's filesystem
    folder = shm_dir()
    folder.mkdir()
    fifo = shm_dir()
    os.mkfifo(fifo)  # opened without blocking, then refused
    assert refusal(lambda: register("/" + link.name)).message == f"'/{link.name}' is not a shared memory object"
    assert refusal(lambda: register("/" + fifo.name)).message == f"'/{fifo.name}' is not a shared memory object"
    error = refusal(lambda: register("/" + folder.name))
    assert error.code == ErrorCode.INVALID_ARG and "Is a directory" in error.message


def test_the_servers_own_segments_are_refused(shm_dir, opened):
    """Slot arenas ("atoll-<pid>-<hex>-fe<i>-<model>", service.py) and the worker pool's segments
    ("atoll-<pid>-<hex>-<vgpu>-<n>", vgpu/pool.py) carry other clients' tensors."""
    arena = Path(SHM_DIR, f"{SEGMENT_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:6]}-fe0-m")
    arena.write_bytes(bytes(64))
    try:
        for key in ("/" + arena.name, arena.name):
            error = refusal(lambda: register(key))
            assert error.code == ErrorCode.INVALID_ARG and "the server's own shared memory" in error.message
    finally:
        arena.unlink()
    assert opened == [] and SEGMENT_PREFIX == "atoll-"


def test_sizes_beyond_the_object_and_an_empty_object_are_refused(shm_dir):
    path, empty = shm_dir(), shm_dir()
    path.write_bytes(bytes(8192))
    empty.write_bytes(b"")
    key = "/" + path.name
    for offset, byte_size in ((8000, 1000), (8193, 0), (0, 8193), (0, 10**30), (2**64 - 1, 1)):
        error = refusal(lambda: register(key, offset, byte_size))
        assert error.code == ErrorCode.INVALID_ARG
        assert error.message == (f"Invalid shared memory region: offset {offset} + byte_size {byte_size} is "
                                 f"beyond the 8192 bytes of '{key}'")  # fmt: skip
    error = refusal(lambda: register("/" + empty.name, 0, 0))
    assert error.code == ErrorCode.INVALID_ARG and error.message == f"shared memory object '/{empty.name}' is empty"
    regions = Regions()
    register(key, 8000, 192, regions)  # up to the last byte
    regions.apply(Register(SystemRegion("end", key, 8192, 0)))  # an empty region at the very end
    assert regions.status("system", None) == [{"name": "r", "key": key, "offset": 8000, "byte_size": 192},
                                              {"name": "end", "key": key, "offset": 8192, "byte_size": 0}]
    regions.close()


def test_the_longest_name_is_taken_and_a_missing_object_is_internal_as_in_triton(shm_dir):
    longest = Path(SHM_DIR, shm_dir().name.ljust(255, "x"))  # NAME_MAX bytes
    longest.write_bytes(bytes(16))
    try:
        regions = Regions()
        register("/" + longest.name, 0, 16, regions)
        regions.close()
    finally:
        longest.unlink()
    error = refusal(lambda: register("/" + shm_dir().name))
    assert error.code == ErrorCode.INTERNAL and error.message.startswith("Unable to open shared memory region")


# ---- over the servers: the answer each transport gives, and nothing registered ------------------


class MappingSupervisor:
    """The supervisor and one front end in this process: a change is made in `regions`."""

    def __init__(self, regions: Regions):
        self.regions = regions

    async def ask(self, action):
        self.regions.apply(action)


def _endpoints() -> Endpoints:
    regions = Regions()
    endpoints = Endpoints(StuckFrontEnd(), Metrics(), regions, MappingSupervisor(regions))
    endpoints.ready = True
    return endpoints


HTTP_BODIES = {
    "traversal": {"key": "/../../etc/passwd", "offset": 0, "byte_size": 8},
    "NUL": {"key": "/a\0b", "offset": 0, "byte_size": 8},
    "key int": {"key": 5, "offset": 0, "byte_size": 8},
    "key list": {"key": ["a"], "offset": 0, "byte_size": 8},
    "offset str": {"key": "/atoll_test_x", "offset": "0", "byte_size": 8},
    "offset negative": {"key": "/atoll_test_x", "offset": -100, "byte_size": 100},
    "byte_size float": {"key": "/atoll_test_x", "offset": 0, "byte_size": 8.5},
    "server segment": {"key": "/atoll-1-abcdef-fe0-m", "offset": 0, "byte_size": 8},
}


def test_http_answers_400_to_every_hostile_registration(shm_dir):
    empty = shm_dir()
    empty.write_bytes(b"")
    bodies = {**HTTP_BODIES, "empty object": {"key": "/" + empty.name, "offset": 0, "byte_size": 0}}
    endpoints = _endpoints()

    async def go():
        async with http_served(endpoints) as client:
            answers = {}
            for what, body in bodies.items():
                r = await client.post("/v2/systemsharedmemory/region/r/register", json=body)
                answers[what] = (r.status, "error" in await r.json())
            status = await client.get("/v2/systemsharedmemory/status")
            return answers, await status.json()

    answers, status = asyncio.run(go())
    assert answers == {what: (400, True) for what in bodies}
    assert status == []


def test_grpc_answers_invalid_argument_to_hostile_keys(shm_dir, victim):
    link = shm_dir()
    link.symlink_to(victim)
    keys = ["/../../etc/passwd", "/a\0b", "a/b", "/" + "a" * 256, "/atoll-1-abcdef-fe0-m", "/" + link.name]

    async def go():
        endpoints = _endpoints()
        async with grpc_channel(endpoints) as channel:
            call = channel.unary_unary("/inference.GRPCInferenceService/SystemSharedMemoryRegister",
                                       request_serializer=pb.SystemSharedMemoryRegisterRequest.SerializeToString,
                                       response_deserializer=pb.SystemSharedMemoryRegisterResponse.FromString)
            codes = []
            for key in keys:
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await call(pb.SystemSharedMemoryRegisterRequest(name="r", key=key, offset=0, byte_size=8))
                codes.append(info.value.code())
        return codes, endpoints.regions.status("system", None)

    codes, status = asyncio.run(go())
    assert codes == [grpc.StatusCode.INVALID_ARGUMENT] * len(keys)
    assert status == [] and victim.read_bytes() == SECRET


def test_a_good_region_still_serves_after_refusals(shm_dir):
    path = shm_dir()
    path.write_bytes(np.arange(4, dtype=np.float32).tobytes())
    regions = Regions()
    for body in HTTP_BODIES.values():
        refusal(lambda: register(body["key"], body["offset"], body["byte_size"], regions))
    regions.apply(Register(SystemRegion("ok", path.name, 0, 16)))
    assert np.frombuffer(regions.read(SharedMemoryRef("ok", 4, 8)), np.float32).tolist() == [1, 2]
    regions.apply(Unregister("system", None))
    assert regions.status("system", None) == []
