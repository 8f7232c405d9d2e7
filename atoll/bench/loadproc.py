"""Load-generator processes for `atoll bench serve`: pre-encoded requests over keep-alive HTTP or gRPC
(unary, or `grpc-stream`: Triton's bidirectional `ModelStreamInfer`, a stream per connection).

The load runs in processes of its own, each an asyncio loop with the lean HTTP client
(`http_client.py`) or gRPC channels, so its cost is metered and cannot hide in the server's.
Requests are encoded before the clock starts (`bodies.py`); with `shm`, inputs lie in a system
shared-memory region the process registers. Open loop: a Poisson stream of `rate / processes`,
latency counted from the *scheduled* send time (no coordinated omission); closed loop:
`concurrency` connections, each sending when its answer arrives. Every request leaves one record
(class, scheduled, sent, done, status: the HTTP code, Triton's for gRPC, or one of CLIENT_ERRORS).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import multiprocessing
import os
import time
import urllib.request
from dataclasses import dataclass, replace
from multiprocessing import shared_memory

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb

from atoll.bench.bodies import grpc_request, http_body
from atoll.bench.http_client import ConnectionLost, HttpClient
from atoll.http.connections import raise_open_file_limit
from atoll.kserve.errors import ErrorCode
from atoll.kserve.grpc_calls import STREAM_WINDOW_BYTES

TIMEOUT, CONNECTION = -1, -2
CLIENT_ERRORS = {TIMEOUT: "timeout", CONNECTION: "connection"}
RECORD = np.dtype([("cls", "i4"), ("scheduled", "f8"), ("sent", "f8"), ("done", "f8"), ("status", "i4")])


GRPC_INFER = "/inference.GRPCInferenceService/ModelInfer"
GRPC_STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
GRPC_CHANNELS = 4  # a load process's gRPC connections (the kernel spreads them over the front ends)
GRPC_TO_HTTP = {code.grpc: code.http for code in ErrorCode}


@dataclass(frozen=True)
class Request:
    """One inference request with one input, whatever the protocol it goes by."""

    cls: int  # index of its traffic class (model x priority) in the bench's class list
    model: str
    input_name: str
    datatype: str  # BYTES (media files) or FP32 (a ready tensor)
    shape: tuple[int, ...]
    data: bytes  # the input as the binary extension carries it
    priority: int  # Triton's: 1 = real-time, 0 = the model's default


@dataclass(frozen=True)
class LoadPlan:
    url: str
    requests: tuple[Request, ...]
    weights: tuple[float, ...]  # chance of each request being the next one sent
    seconds: float  # sending period, warm-up included
    rate: float | None = None  # open loop: Poisson arrivals per second, all processes together
    concurrency: int = 0  # closed loop: connections, all processes together
    timeout_s: float = 60.0
    seed: int = 0
    cpus: tuple[int, ...] = ()  # pin the load processes here (empty: wherever the OS puts them)
    protocol: str = "http"  # http | grpc
    grpc: str = ""  # the server's gRPC host:port
    shm: bool = False  # inputs in system shared memory


def split(plan: LoadPlan, processes: int) -> list[LoadPlan]:
    """One plan per process: the rate or the connections shared out, an independent seed each
    (the sum of independent Poisson streams is the Poisson stream of the summed rate)."""
    out = []
    for i in range(processes):
        rate = plan.rate / processes if plan.rate else None
        concurrency = plan.concurrency // processes + (i < plan.concurrency % processes)
        out.append(replace(plan, rate=rate, concurrency=concurrency, seed=plan.seed * 1000 + i))
    return [p for p in out if p.rate or p.concurrency]


class LoadProcesses:
    """Start the load processes, let them import and connect, then `go()` sends from one shared
    monotonic start (CLOCK_MONOTONIC is system-wide on Linux) and `records()` gathers them."""

    def __init__(self, plans: list[LoadPlan]):
        ctx = multiprocessing.get_context("spawn")
        self.conns, self.procs = [], []
        for plan in plans:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_main, args=(plan, child), name="atoll-bench-load", daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        for conn in self.conns:
            conn.recv()  # "ready"
        self.start = 0.0

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def go(self, lead_s: float = 0.2) -> float:
        self.start = time.monotonic() + lead_s
        for conn in self.conns:
            conn.send(self.start)
        return self.start

    def records(self) -> np.ndarray:
        parts = [conn.recv() for conn in self.conns]
        for proc in self.procs:
            proc.join()
        return np.concatenate(parts) if parts else np.zeros(0, RECORD)

    def close(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join()

    def __enter__(self) -> LoadProcesses:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _main(plan: LoadPlan, conn) -> None:
    if plan.cpus:
        os.sched_setaffinity(0, plan.cpus)
    raise_open_file_limit()  # an overloaded server leaves thousands of open-loop requests in flight, a socket each
    conn.send(asyncio.run(_drive(plan, conn)))


class _Regions:
    """A shared-memory region per request holding its input, registered with the server."""

    def __init__(self, url: str, requests: tuple[Request, ...]):
        self.url = url
        self.names = [f"atoll_bench_{os.getpid()}_{i}" for i in range(len(requests))]
        self._segments = []
        for name, request in zip(self.names, requests):
            segment = shared_memory.SharedMemory(create=True, size=len(request.data))
            segment.buf[: len(request.data)] = request.data
            self._segments.append(segment)
            self._call(f"region/{name}/register", {"key": "/" + segment.name, "offset": 0,
                                                   "byte_size": len(request.data)})  # fmt: skip

    def _call(self, path: str, doc: dict | None = None) -> None:
        body = json.dumps(doc).encode() if doc else b""
        with urllib.request.urlopen(urllib.request.Request(f"{self.url}/v2/systemsharedmemory/{path}", body),
                                    timeout=60):  # fmt: skip
            pass

    def close(self) -> None:
        for name in self.names:
            self._call(f"region/{name}/unregister")
        for segment in self._segments:
            segment.close()
            segment.unlink()


class _Http:
    def __init__(self, plan: LoadPlan, regions: list[str | None]):
        # an open loop may need a connection per request in flight; a closed loop one per client
        self.client = HttpClient(plan.url, plan.timeout_s, max_connections=plan.concurrency or 4096)
        self.encoded = [self.client.request(f"/v2/models/{r.model}/infer",
                                            *http_body(r.input_name, r.datatype, list(r.shape), r.data, r.priority, region))
                        for r, region in zip(plan.requests, regions)]  # fmt: skip

    async def send(self, index: int) -> int:
        try:
            return await self.client.send(self.encoded[index])
        except TimeoutError:
            return TIMEOUT
        except (ConnectionLost, OSError):
            return CONNECTION

    async def close(self) -> None:
        self.client.close()


def _grpc_encoded(plan: LoadPlan, regions: list[str | None]) -> list[bytes]:
    return [grpc_request(r.model, r.input_name, r.datatype, list(r.shape), r.data, r.priority, region)
            for r, region in zip(plan.requests, regions)]  # fmt: skip


def grpc_channels(address: str) -> list[grpc.aio.Channel]:
    """GRPC_CHANNELS to `address`, a connection each (no shared subchannels); messages go as bytes
    encoded beforehand."""
    return [grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1),
                                                          ("grpc.max_receive_message_length", -1),
                                                          ("grpc.http2.lookahead_bytes", STREAM_WINDOW_BYTES)])
            for _ in range(GRPC_CHANNELS)]  # fmt: skip


class _Grpc:
    def __init__(self, plan: LoadPlan, regions: list[str | None]):
        self.timeout_s = plan.timeout_s
        self.encoded = _grpc_encoded(plan, regions)
        self.channels = grpc_channels(plan.grpc)
        self.calls = itertools.cycle([channel.unary_unary(GRPC_INFER) for channel in self.channels])

    async def send(self, index: int) -> int:
        try:
            await next(self.calls)(self.encoded[index], timeout=self.timeout_s)
            return 200
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return TIMEOUT
            return GRPC_TO_HTTP.get(exc.code().name, 500)

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()


class _GrpcStream:
    """`ModelStreamInfer`: one bidirectional stream per connection, requests written into it as they
    are sent and matched to their answers by id (a stream answers in any order). A request's id is
    appended to its pre-encoded bytes: protobuf keeps the last value of a field that occurs twice."""

    def __init__(self, plan: LoadPlan, regions: list[str | None]):
        self.timeout_s = plan.timeout_s
        self.encoded = _grpc_encoded(plan, regions)
        self.channels = grpc_channels(plan.grpc)
        # a stream takes one write at a time: each is fed from a queue
        self.queues = [asyncio.Queue() for _ in self.channels]
        streams = [channel.stream_stream(GRPC_STREAM, response_deserializer=pb.ModelStreamInferResponse.FromString)(
                   _drain(queue)) for channel, queue in zip(self.channels, self.queues)]  # fmt: skip
        self.next = itertools.cycle(range(len(streams)))
        self.ids = itertools.count()
        self.waiting: list[dict[str, asyncio.Future]] = [{} for _ in streams]  # per stream, by id
        self.readers = [asyncio.create_task(self._read(stream, waiting))
                        for stream, waiting in zip(streams, self.waiting)]  # fmt: skip

    @staticmethod
    async def _read(stream, waiting: dict[str, asyncio.Future]) -> None:
        try:
            async for answer in stream:
                future = waiting.pop(answer.infer_response.id, None)
                if future is not None and not future.done():
                    # a stream's failure carries only a message: counted as a server error
                    future.set_result(500 if answer.error_message else 200)
        except grpc.aio.AioRpcError:
            pass
        for future in waiting.values():  # the stream broke: what it held is lost
            if not future.done():
                future.set_result(CONNECTION)

    async def send(self, index: int) -> int:
        k = next(self.next)
        if self.readers[k].done():  # its stream ended: nothing sent into it would be answered
            return CONNECTION
        request_id = str(next(self.ids))
        future = self.waiting[k][request_id] = asyncio.get_running_loop().create_future()
        self.queues[k].put_nowait(self.encoded[index] + pb.ModelInferRequest(id=request_id).SerializeToString())
        try:
            return await asyncio.wait_for(future, self.timeout_s)
        except TimeoutError:
            return TIMEOUT
        finally:
            self.waiting[k].pop(request_id, None)

    async def close(self) -> None:
        for queue in self.queues:
            queue.put_nowait(None)
        await asyncio.gather(*self.readers)
        for channel in self.channels:
            await channel.close()


async def _drain(queue: asyncio.Queue):
    """A stream's requests, until None."""
    while (item := await queue.get()) is not None:
        yield item


TRANSPORTS = {"http": _Http, "grpc": _Grpc, "grpc-stream": _GrpcStream}


async def _drive(plan: LoadPlan, conn) -> np.ndarray:
    rng = np.random.default_rng(plan.seed)
    p = np.asarray(plan.weights, dtype=float)
    p /= p.sum()
    records: list[tuple] = []
    regions = _Regions(plan.url, plan.requests) if plan.shm else None
    transport = TRANSPORTS[plan.protocol](plan, regions.names if regions else [None] * len(plan.requests))
    try:
        conn.send("ready")
        start = await asyncio.to_thread(conn.recv)
        end = start + plan.seconds

        async def one(index: int, scheduled: float) -> None:
            sent = time.monotonic()
            status = await transport.send(index)
            records.append((plan.requests[index].cls, scheduled, sent, time.monotonic(), status))

        picks: list[int] = []

        def pick() -> int:  # drawn in bulk: a weighted draw costs tens of microseconds
            if not picks:
                picks.extend(rng.choice(len(plan.requests), size=4096, p=p).tolist())
            return picks.pop()

        if plan.rate:
            tasks = set()
            t = start + rng.exponential(1 / plan.rate)
            while t < end:
                delay = t - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(one(pick(), t))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                t += rng.exponential(1 / plan.rate)
            await asyncio.gather(*tasks)
        else:
            async def client() -> None:
                await asyncio.sleep(max(0.0, start - time.monotonic()))
                while (now := time.monotonic()) < end:
                    await one(pick(), now)

            await asyncio.gather(*(client() for _ in range(plan.concurrency)))
    finally:
        await transport.close()
        if regions is not None:
            regions.close()
    return np.array(records, dtype=RECORD)
