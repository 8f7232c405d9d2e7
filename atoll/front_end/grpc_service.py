"""KServe v2 / Triton gRPC server (`inference.GRPCInferenceService`, grpc.aio) over a front end's
`endpoints.Endpoints`: the same models, request path, limits and errors as HTTP.

Every front-end process serves the gRPC port beside the HTTP one (SO_REUSEPORT, on its event loop).
The messages and the service stub are those `tritonclient[grpc]` ships, generated from Triton's
protos, read and written by `kserve.grpc_codec`. `ModelStreamInfer` answers each request of the
stream as soon as it is done, in any order, with a failure as the response's `error_message`. Errors
carry the gRPC status code Triton gives their kind (`errors.ErrorCode`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from types import SimpleNamespace

import grpc
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2_grpc
from tritonclient.grpc import service_pb2 as pb

from atoll.front_end.endpoints import Endpoints, unsupported
from atoll.http.bodies import BodyBudget
from atoll.http.refusal_pace import RefusalPace
from atoll.kserve.errors import ApiError, ErrorCode
from atoll.kserve.grpc_calls import STREAM_WINDOW_BYTES, internal_message, stream_answers
from atoll.kserve.grpc_codec import proto_parameters, request_from_proto, response_to_proto, stream_error
from atoll.kserve.protocol import DTYPES
from atoll.kserve.restricted import Restrictions
from atoll.kserve.shm_registry import CudaRegion, SystemRegion
from atoll.observe.throttled import Throttled

log = logging.getLogger(__name__)


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
        return json_format.ParseDict(self.endpoints.metadata(request.name, request.version), pb.ModelMetadataResponse())

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
        await self.endpoints.load(request.model_name, proto_parameters(request.parameters))
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
                if self.endpoints.decoupled(msg.model_name, msg.model_version or None):
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
            spec = self.endpoints.find(msg.model_name, msg.model_version or None)
            version = spec.version if spec is not None else msg.model_version
            while (item := await responses.get()) is not None:
                if isinstance(item, str):
                    yield stream_error(msg, item)
                else:
                    yield pb.ModelStreamInferResponse(infer_response=response_to_proto(msg.model_name, version,
                                                                                       msg.id, item))  # fmt: skip
        finally:
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
