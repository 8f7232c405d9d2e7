"""KServe v2 / Triton gRPC server (`inference.GRPCInferenceService`, grpc.aio) over a front end's
`endpoints.Endpoints`: the same models, request path, limits and errors as HTTP.

Every front-end process serves the gRPC port beside the HTTP one (SO_REUSEPORT, on its event loop).
The messages and the service stub are those `tritonclient[grpc]` ships, generated from Triton's
protos. Tensors arrive as `raw_input_contents` (what `tritonclient.grpc` sends), typed `contents`,
or shared-memory references, and leave as `raw_output_contents` (an empty entry for an output written
to shared memory, as Triton does). `ModelStreamInfer` answers each request of the stream as soon as
it is done, in any order, with a failure as the response's `error_message`. Errors carry the gRPC
status code Triton gives their kind (`errors.ErrorCode`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from types import SimpleNamespace

import grpc
import numpy as np
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2_grpc
from tritonclient.grpc import service_pb2 as pb

from atoll.front_end.endpoints import Endpoints, unsupported
from atoll.http.bodies import BodyBudget
from atoll.http.refusal_pace import RefusalPace
from atoll.kserve.errors import ApiError, ErrorCode
from atoll.kserve.protocol import (
    DTYPES,
    InferRequest,
    Output,
    ProtocolError,
    Tensor,
    element_count,
    join_bytes,
    shared_memory_of,
    tensor_from_bytes,
)
from atoll.kserve.restricted import Restrictions
from atoll.kserve.shm_registry import CudaRegion, SystemRegion
from atoll.observe.throttled import Throttled

log = logging.getLogger("atoll.front_end.grpc_service")
STREAM_UNSENT = 64  # a stream's requests read and not yet answered to the client

CONTENTS = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
            "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
            "UINT32": "uint_contents", "UINT64": "uint64_contents", "FP32": "fp32_contents",
            "FP64": "fp64_contents", "BYTES": "bytes_contents"}  # fmt: skip


def _parameters(entries) -> dict:
    return {key: getattr(value, value.WhichOneof("parameter_choice")) for key, value in entries.items()
            if value.WhichOneof("parameter_choice")}  # fmt: skip


# which datatypes' typed contents are fixed-width little-endian values once packed on the wire
_FIXED = {"FP32": "<f4", "FP64": "<f8"}
_VARINT_SLICE = 1 << 20  # bytes of packed varints decoded at once (temporaries ~8x that)


def _typed_contents(t, count: int) -> np.ndarray:
    """Input `t`'s typed contents as an array of its datatype, read from the contents' packed wire
    form (the protobuf runtime has no buffer of a repeated field): fixed-width values viewed,
    varints decoded by NumPy, no Python object per element but for BYTES."""
    field = CONTENTS.get(t.datatype)
    if field is None:
        raise ProtocolError(f"input {t.name!r}: {t.datatype} needs raw_input_contents")
    if t.datatype == "BYTES":
        values = np.empty(len(getattr(t.contents, field)), object)
        values[:] = list(getattr(t.contents, field))
    else:
        payload = _packed(t.contents.SerializeToString(), t.contents.DESCRIPTOR.fields_by_name[field].number)
        values = np.frombuffer(payload, _FIXED[t.datatype]) if t.datatype in _FIXED else _varints(payload)
    if len(values) != count:
        raise ProtocolError(f"input {t.name!r}: {len(values)} values for shape {list(t.shape)}")
    if t.datatype in _FIXED or t.datatype == "BYTES":
        return values.astype(DTYPES[t.datatype], copy=False)
    if t.datatype == "BOOL":
        return values != 0
    dt = DTYPES[t.datatype]
    signed = values.view(np.int64) if dt.kind == "i" else values  # int32s are sign-extended varints
    info = np.iinfo(dt)
    if len(signed) and (signed.min() < info.min or signed.max() > info.max):
        raise ProtocolError(f"input {t.name!r}: a value is outside the range of {t.datatype}")
    return signed.astype(dt)


def _packed(message: bytes, number: int) -> bytes:
    """The payloads of field `number` (packed, length-delimited) in a serialized message, joined."""
    parts, pos = [], 0
    while pos < len(message):
        tag, pos = read_varint(message, pos)
        if tag & 7 != 2:  # the contents' repeated scalars are packed; nothing else is written
            raise ProtocolError("typed contents in a form this server does not read")
        size, pos = read_varint(message, pos)
        if tag >> 3 == number:
            parts.append(message[pos : pos + size])
        pos += size
    return b"".join(parts)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return value, pos


def _varints(payload: bytes) -> np.ndarray:
    """Packed varints as uint64, decoded a slice at a time."""
    data = np.frombuffer(payload, np.uint8)
    ends = np.flatnonzero(data < 0x80)
    out = np.empty(len(ends), np.uint64)
    first = 0
    for lo in range(0, len(ends), _VARINT_SLICE):
        last = ends[min(lo + _VARINT_SLICE, len(ends)) - 1]
        chunk, stops = data[first : last + 1], ends[lo : lo + _VARINT_SLICE] - first
        starts = np.concatenate(([0], stops[:-1] + 1))
        offset = np.arange(len(chunk)) - np.repeat(starts, stops - starts + 1)
        parts = (chunk & 0x7F).astype(np.uint64) << (7 * offset).astype(np.uint64)
        out[lo : lo + len(stops)] = np.bitwise_or.reduceat(parts, starts)
        first = last + 1
    return out


def _tensor(t, raw_contents, regions) -> Tensor:
    params, shape = _parameters(t.parameters), list(t.shape)
    if t.datatype not in DTYPES:
        raise ProtocolError(f"input {t.name!r}: unknown datatype {t.datatype!r}")
    count = element_count(shape, t.name)
    ref = shared_memory_of(params, f"input {t.name!r}")
    if ref is not None:
        data = tensor_from_bytes(t.name, t.datatype, shape, regions.read(ref))
    elif raw_contents is not None:
        raw = next(raw_contents, None)
        if raw is None:
            raise ProtocolError(f"input {t.name!r}: no raw_input_contents left for it")
        data = tensor_from_bytes(t.name, t.datatype, shape, raw)
    else:
        data = _typed_contents(t, count).reshape(shape)
    return Tensor(t.name, t.datatype, shape, data, params)


def request_from_proto(msg: pb.ModelInferRequest, regions) -> InferRequest:
    raw_contents = iter(msg.raw_input_contents) if len(msg.raw_input_contents) else None
    inputs = [_tensor(t, raw_contents, regions) for t in msg.inputs]
    outputs = [{"name": o.name, "parameters": _parameters(o.parameters)} for o in msg.outputs]
    return InferRequest(msg.id or None, inputs, outputs, _parameters(msg.parameters))


def response_to_proto(name: str, version: str, request_id: str | None, outputs: list[Output]) -> pb.ModelInferResponse:
    response = pb.ModelInferResponse(model_name=name, model_version=version, id=request_id or "")
    for out in outputs:
        response.outputs.add(name=out.name, datatype=out.datatype, shape=out.shape)
        if out.data is None:
            response.raw_output_contents.append(b"")
        elif out.datatype == "BYTES":
            response.raw_output_contents.append(join_bytes(out.data))
        else:
            response.raw_output_contents.append(np.ascontiguousarray(out.data).tobytes())
    return response


def internal_message(exc: Exception, method: str) -> str:
    """A bug's message to the client, as HTTP's: its traceback goes to the log, not to the client."""
    log.error("%s failed", method, exc_info=exc)
    return f"internal error ({type(exc).__name__})"


def _answers(method):
    """An ApiError ends the call with its gRPC status code and message; anything else is a bug,
    logged and answered INTERNAL (grpcio would answer UNKNOWN with the exception's repr)."""

    @functools.wraps(method)
    async def call(self, request, context):
        try:
            return await method(self, request, context)
        except ApiError as exc:
            await context.abort(grpc.StatusCode[exc.code.grpc], exc.message)
        except Exception as exc:  # noqa: BLE001 - a bug: logged with its traceback, answered without
            await context.abort(grpc.StatusCode.INTERNAL, internal_message(exc, method.__name__))

    return call


def _cost(msg: pb.ModelInferRequest) -> int:
    """The bytes an infer message holds and its typed contents will decode to (their packed copy
    and their tensor; raw contents are viewed, not copied)."""
    cost = msg.ByteSize()
    for t in msg.inputs:
        if t.HasField("contents") and t.datatype in DTYPES and t.datatype != "BYTES":
            packed = t.contents.ByteSize()  # each element takes a byte at least: bounds a hostile shape
            cost += packed + min(math.prod(t.shape), packed) * DTYPES[t.datatype].itemsize
    return cost


class GrpcService(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, endpoints: Endpoints, pace: RefusalPace | None = None, budget: BodyBudget | None = None):
        self.endpoints = endpoints
        self.pace = pace  # of UNAVAILABLE answers to infer calls, as HTTP's 503s (`refusal_pace`)
        self.budget = budget  # the HTTP bodies' budget, which infer messages share (None: no bound)

    # -- health, metadata, statistics ---------------------------------------------------------------

    @_answers
    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    @_answers
    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=self.endpoints.server_ready())

    @_answers
    async def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=self.endpoints.model_ready(request.name, request.version))

    @_answers
    async def ServerMetadata(self, request, context):
        return json_format.ParseDict(self.endpoints.server_metadata(), pb.ServerMetadataResponse())

    @_answers
    async def ModelMetadata(self, request, context):
        spec = self.endpoints.model(request.name, request.version)
        return json_format.ParseDict(spec.metadata(), pb.ModelMetadataResponse())

    @_answers
    async def ModelConfig(self, request, context):
        spec = self.endpoints.model(request.name, request.version)
        return pb.ModelConfigResponse(config=json_format.ParseDict(spec.config(), model_config_pb2.ModelConfig()))

    @_answers
    async def ModelStatistics(self, request, context):
        stats = self.endpoints.statistics(request.name, request.version)
        return json_format.ParseDict(stats, pb.ModelStatisticsResponse())

    @_answers
    async def TraceSetting(self, request, context):
        unsupported("trace settings")

    @_answers
    async def LogSettings(self, request, context):
        unsupported("log settings")

    # -- repository and shared memory ---------------------------------------------------------------

    @_answers
    async def RepositoryIndex(self, request, context):
        index = await self.endpoints.repository_index(request.ready)
        return json_format.ParseDict({"models": index}, pb.RepositoryIndexResponse())

    @_answers
    async def RepositoryModelLoad(self, request, context):
        await self.endpoints.load(request.model_name, _parameters(request.parameters))
        return pb.RepositoryModelLoadResponse()

    @_answers
    async def RepositoryModelUnload(self, request, context):
        await self.endpoints.unload(request.model_name)
        return pb.RepositoryModelUnloadResponse()

    def _region_status(self, kind: str, name: str, response):
        regions = self.endpoints.region_status(kind, name)
        return json_format.ParseDict({"regions": {r["name"]: r for r in regions}}, response)

    @_answers
    async def SystemSharedMemoryStatus(self, request, context):
        return self._region_status("system", request.name, pb.SystemSharedMemoryStatusResponse())

    @_answers
    async def SystemSharedMemoryRegister(self, request, context):
        await self.endpoints.register(SystemRegion(request.name, request.key, request.offset, request.byte_size))
        return pb.SystemSharedMemoryRegisterResponse()

    @_answers
    async def SystemSharedMemoryUnregister(self, request, context):
        await self.endpoints.unregister("system", request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @_answers
    async def CudaSharedMemoryStatus(self, request, context):
        return self._region_status("cuda", request.name, pb.CudaSharedMemoryStatusResponse())

    @_answers
    async def CudaSharedMemoryRegister(self, request, context):
        region = CudaRegion(request.name, request.raw_handle, request.device_id, request.byte_size)
        await self.endpoints.register(region)
        return pb.CudaSharedMemoryRegisterResponse()

    @_answers
    async def CudaSharedMemoryUnregister(self, request, context):
        await self.endpoints.unregister("cuda", request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    # -- inference ----------------------------------------------------------------------------------

    async def _infer(self, msg: pb.ModelInferRequest) -> pb.ModelInferResponse:
        async def decode():
            return request_from_proto(msg, self.endpoints.regions)

        held = SimpleNamespace(held=0)  # its share of the budget, as an HTTP request's
        try:
            if self.budget is not None:
                self.budget.reserve(held, _cost(msg))
            spec, request, outputs = await self.endpoints.infer(msg.model_name, msg.model_version, decode)
        except ApiError as exc:
            if exc.code == ErrorCode.UNAVAILABLE and self.pace is not None:
                await self.pace.turn()
            raise
        finally:
            if self.budget is not None:
                self.budget.release(held)
        return response_to_proto(spec.name, spec.version, request.id, outputs)

    @_answers
    async def ModelInfer(self, request, context):
        return await self._infer(request)

    async def ModelStreamInfer(self, request_iterator, context):
        """Every request of the stream gets exactly one answer, whatever fails: a bug too (logged)."""

        async def one(msg):
            try:
                if self.endpoints.decoupled(msg.model_name):
                    return self._decoupled(msg)
                return pb.ModelStreamInferResponse(infer_response=await self._infer(msg))
            except ApiError as exc:
                return stream_error(msg, exc.message)
            except Exception as exc:  # noqa: BLE001 - a bug: logged, and the request still answered
                return stream_error(msg, internal_message(exc, "ModelStreamInfer"))

        async for answer in stream_answers(request_iterator, one):
            yield answer

    async def _decoupled(self, msg: pb.ModelInferRequest):
        """A decoupled model's request: each of its responses as it comes (an error ends them)."""
        responses: asyncio.Queue = asyncio.Queue()

        async def decode():
            return request_from_proto(msg, self.endpoints.regions)

        async def run() -> None:
            try:
                await self.endpoints.infer(msg.model_name, msg.model_version, decode, on_response=responses.put_nowait)
            except ApiError as exc:
                responses.put_nowait(exc.message)
            except Exception as exc:  # noqa: BLE001 - a bug: logged, and the request still answered
                responses.put_nowait(internal_message(exc, "ModelStreamInfer"))
            responses.put_nowait(None)

        task = asyncio.create_task(run())
        try:
            spec = self.endpoints.front_end.models.get(msg.model_name)
            version = spec.version if spec is not None else msg.model_version
            while (item := await responses.get()) is not None:
                if isinstance(item, str):
                    yield stream_error(msg, item)
                else:
                    yield pb.ModelStreamInferResponse(infer_response=response_to_proto(msg.model_name, version,
                                                                                       msg.id, item))  # fmt: skip
        finally:
            task.cancel()


async def stream_answers(request_iterator, one):
    """A stream's answers as they come, `await one(request)` each (it answers every request, never
    raises). At most STREAM_UNSENT requests are read ahead of the answers the client has taken: a
    client that sent 3,000 requests and read none grew a front end by 600 MB of answers waiting."""
    answers: asyncio.Queue = asyncio.Queue()
    running: set[asyncio.Task] = set()
    unsent = asyncio.Semaphore(STREAM_UNSENT)

    async def answer(msg) -> None:
        result = await one(msg)
        if not hasattr(result, "__aiter__"):
            answers.put_nowait(result)
            return
        taken = True  # several answers (a decoupled model's): each past the first takes a place too
        async for item in result:
            if not taken:
                await unsent.acquire()
            taken = False
            answers.put_nowait(item)
        if taken:  # none at all: its place is free
            unsent.release()

    async def read() -> None:
        try:
            while True:
                await unsent.acquire()
                try:
                    msg = await anext(request_iterator)
                except StopAsyncIteration:
                    break
                task = asyncio.create_task(answer(msg))
                running.add(task)
                task.add_done_callback(running.discard)
            await asyncio.gather(*running)
        finally:  # the stream ends, not hangs, if reading it fails
            answers.put_nowait(None)

    reader = asyncio.create_task(read())
    try:
        while (item := await answers.get()) is not None:
            yield item
            unsent.release()
        await reader  # reading's failure, if it failed, ends the call
    finally:
        reader.cancel()
        for task in running:
            task.cancel()


class _CallEnded(logging.Filter):
    """grpcio logs an ERROR with a traceback (ExecuteBatchError, "Failed execute_batch") when it
    cannot send an answer because the call ended first: the client cancelled, or its deadline
    passed. That is the client's doing, as an HTTP client that goes away: one INFO line at most
    every 10 s instead (a storm of short deadlines would otherwise fill the log)."""

    def __init__(self):
        super().__init__()
        self._said = Throttled(log)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and type(record.exc_info[1]).__name__ == "ExecuteBatchError":
            self._said.info("a gRPC answer was not sent: its call had ended (cancelled, or past its deadline)")
            return False
        return True


def stream_error(msg: pb.ModelInferRequest, message: str) -> pb.ModelStreamInferResponse:
    response = pb.ModelInferResponse(model_name=msg.model_name, model_version=msg.model_version, id=msg.id)
    return pb.ModelStreamInferResponse(error_message=message, infer_response=response)


# HTTP/2's initial stream window (64 KB) makes a 600 KB tensor wait on ~10 window updates; 8 MB
# lets a request in at once (measured: docs/benchmarks.md).
STREAM_WINDOW_BYTES = 8 << 20


_CALL_ENDED = _CallEnded()


class _Restricted(grpc.aio.ServerInterceptor):
    """Triton's --grpc-restricted-protocol: a call of a restricted method without its metadata key
    and value ends at once with Triton's status (`restricted.Rule.grpc_refusal`), its request unread."""

    def __init__(self, restrictions: Restrictions):
        self.restrictions = restrictions

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        rule = self.restrictions.grpc_rule(details.method.rpartition("/")[2])
        if rule is None or handler is None:
            return handler
        refusal = rule.grpc_refusal(dict(details.invocation_metadata or ()))
        if refusal is None:
            return handler

        async def refuse(request, context):
            await context.abort(*refusal)

        kind = _HANDLER_KINDS[handler.request_streaming, handler.response_streaming]
        return kind(refuse, handler.request_deserializer, handler.response_serializer)


# a refusing handler of the refused one's shape, by (request streaming, response streaming)
_HANDLER_KINDS = {(False, False): grpc.unary_unary_rpc_method_handler,
                  (False, True): grpc.unary_stream_rpc_method_handler,
                  (True, False): grpc.stream_unary_rpc_method_handler,
                  (True, True): grpc.stream_stream_rpc_method_handler}  # fmt: skip


async def start(endpoints: Endpoints, host: str, port: int, max_request_bytes: int,
                limits: list[tuple[str, int]] = (), pace: RefusalPace | None = None,
                budget: BodyBudget | None = None, restrictions: Restrictions | None = None) -> grpc.aio.Server:
    """A started gRPC server on `port`, shared with the other front ends (SO_REUSEPORT); `limits`
    are further options (`connections.grpc_limits`), `pace` that of its UNAVAILABLE answers,
    `budget` the HTTP bodies' one, which its infer messages share, `restrictions` Triton's restricted
    protocols (an interceptor only where some are: none costs nothing)."""
    interceptors = [_Restricted(restrictions)] if restrictions is not None and restrictions.grpc else None
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", max_request_bytes),
                                      ("grpc.max_send_message_length", -1), ("grpc.so_reuseport", 1),
                                      ("grpc.http2.lookahead_bytes", STREAM_WINDOW_BYTES), *limits],
                             interceptors=interceptors)  # fmt: skip
    logging.getLogger("grpc._cython.cygrpc").addFilter(_CALL_ENDED)
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(GrpcService(endpoints, pace, budget), server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if server.add_insecure_port(address) == 0:
        raise OSError(f"gRPC cannot listen on {address}")
    await server.start()
    return server
