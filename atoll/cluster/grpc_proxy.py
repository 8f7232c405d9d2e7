"""The endpoint's KServe v2 gRPC service (`inference.GRPCInferenceService`, grpc.aio, generic
handlers on raw bytes): an infer message is parsed for its model and `priority` only and sent on to
the chosen node's gRPC port as it arrived, the node's answer returned as it came; a stream's
requests go one by one, each to the node routing picks. The cluster's own answers (index,
statistics, readiness, model control, shared memory refused) are those of `ClusterView`, as over HTTP.
"""

from __future__ import annotations

import asyncio
import base64
from functools import partial

import grpc
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from atoll.cluster.cluster_view import ClusterView, NodeState
from atoll.cluster.http_proxy import SHARED_MEMORY_REFUSAL
from atoll.cluster.routing import real_time
from atoll.kserve.errors import ApiError, ErrorCode
from atoll.kserve.grpc_calls import internal_message, stream_answers
from atoll.kserve.grpc_codec import read_varint, stream_error

SERVICE = "inference.GRPCInferenceService"
# what a node is given of a call's metadata: not gRPC's own nor HTTP/2's
_OWN_METADATA = ("grpc-", ":", "user-agent", "content-type", "te")
# the fields of an infer message routing reads (`_head`): not its tensors
_HEAD_FIELDS = {pb.ModelInferRequest.DESCRIPTOR.fields_by_name[name].number
                for name in ("model_name", "model_version", "id", "parameters")}  # fmt: skip
# a node's answer wrapped as ModelStreamInferResponse.infer_response, without parsing it
_STREAM_ANSWER_TAG = bytes([pb.ModelStreamInferResponse.DESCRIPTOR.fields_by_name["infer_response"].number << 3 | 2])
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1),
                   ("grpc.initial_reconnect_backoff_ms", 200), ("grpc.max_reconnect_backoff_ms", 2000)]  # fmt: skip


class GrpcProxy:
    """The gRPC service over `view`; `restrictions` (`kserve.restricted`) refuses restricted calls
    without their metadata key; `timeout_s` bounds a forwarded call."""

    def __init__(self, view: ClusterView, restrictions, timeout_s: float):
        self.view = view
        self.restrictions = restrictions
        self.timeout_s = timeout_s
        self._channels: dict[str, tuple[str, grpc.aio.Channel]] = {}  # node -> (its address, channel)

    def handler(self) -> grpc.GenericRpcHandler:
        unary = {
            "ServerLive": self.server_live, "ServerReady": self.server_ready, "ModelReady": self.model_ready,
            **{name: partial(self.any_node, name) for name in ("ServerMetadata", "TraceSetting", "LogSettings")},
            **{name: partial(self.model_call, name) for name in ("ModelMetadata", "ModelConfig")},
            "ModelStatistics": self.statistics, "RepositoryIndex": self.repository_index,
            "RepositoryModelLoad": self.load, "RepositoryModelUnload": self.unload, "ModelInfer": self.infer,
            **{f"{kind}SharedMemory{call}": getattr(self, f"region_{call.lower()}")
               for kind in ("System", "Cuda") for call in ("Status", "Register", "Unregister")},
        }  # fmt: skip
        handlers = {name: grpc.unary_unary_rpc_method_handler(self._answers(name, fn)) for name, fn in unary.items()}
        handlers["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(self.stream_infer)
        return grpc.method_handlers_generic_handler(SERVICE, handlers)

    def _answers(self, name: str, method):
        """The call behind its restriction; an ApiError ends it with its kind's gRPC status code."""
        rule = self.restrictions.grpc_rule(name) if self.restrictions else None

        async def call(raw: bytes, context) -> bytes:
            if rule is not None:
                refusal = rule.grpc_refusal(dict(context.invocation_metadata() or ()))
                if refusal is not None:
                    await context.abort(*refusal)
            try:
                return await method(raw, context)
            except ApiError as exc:
                await context.abort(grpc.StatusCode[exc.code.grpc], exc.message)
            except _NodeError as exc:
                await context.abort(exc.code, exc.message)
            except DecodeError as exc:
                error = _unreadable(exc)
                await context.abort(grpc.StatusCode[error.code.grpc], error.message)
            except Exception as exc:  # noqa: BLE001 - a bug: logged with its traceback, answered INTERNAL
                await context.abort(grpc.StatusCode.INTERNAL, internal_message(exc, name))

        return call

    # -- the cluster's own answers ------------------------------------------------------------------

    async def server_live(self, raw: bytes, context) -> bytes:
        return pb.ServerLiveResponse(live=True).SerializeToString()

    async def server_ready(self, raw: bytes, context) -> bytes:
        return pb.ServerReadyResponse(ready=self.view.ready()).SerializeToString()

    async def model_ready(self, raw: bytes, context) -> bytes:
        request = pb.ModelReadyRequest.FromString(raw)
        ready = bool(self.view.candidates(request.name, request.version))
        return pb.ModelReadyResponse(ready=ready).SerializeToString()

    async def repository_index(self, raw: bytes, context) -> bytes:
        index = self.view.index(pb.RepositoryIndexRequest.FromString(raw).ready)
        return json_format.ParseDict({"models": index}, pb.RepositoryIndexResponse()).SerializeToString()

    async def load(self, raw: bytes, context) -> bytes:
        request = pb.RepositoryModelLoadRequest.FromString(raw)
        parameters = {}
        for key, value in request.parameters.items():  # as HTTP carries them: files in base64
            which = value.WhichOneof("parameter_choice")
            if which is not None:
                v = getattr(value, which)
                parameters[key] = base64.b64encode(v).decode() if which == "bytes_param" else v
        await self.view.load(request.model_name, parameters)
        return pb.RepositoryModelLoadResponse().SerializeToString()

    async def unload(self, raw: bytes, context) -> bytes:
        await self.view.unload(pb.RepositoryModelUnloadRequest.FromString(raw).model_name)
        return pb.RepositoryModelUnloadResponse().SerializeToString()

    async def statistics(self, raw: bytes, context) -> bytes:
        request = pb.ModelStatisticsRequest.FromString(raw)
        stats = await self.view.statistics(request.name, request.version)
        return json_format.ParseDict(stats, pb.ModelStatisticsResponse()).SerializeToString()

    async def region_status(self, raw: bytes, context) -> bytes:
        name = pb.SystemSharedMemoryStatusRequest.FromString(raw).name  # (the CUDA request has the same field)
        if name:
            raise ApiError(ErrorCode.NOT_FOUND,
                           f"Unable to find shared memory region: '{name}' ({SHARED_MEMORY_REFUSAL})")  # fmt: skip
        return b""  # an empty status answer of either kind

    async def region_register(self, raw: bytes, context) -> bytes:
        raise ApiError(ErrorCode.UNSUPPORTED, SHARED_MEMORY_REFUSAL)

    async def region_unregister(self, raw: bytes, context) -> bytes:
        return b""  # nothing is registered here

    # -- forwarded to a node --------------------------------------------------------------------------

    async def infer(self, raw: bytes, context) -> bytes:
        return await self._infer(raw, _metadata(context))

    async def _infer(self, raw: bytes, metadata) -> bytes:
        request = _head(raw)
        candidates = self.view.candidates(request.model_name, request.model_version)
        return await self._forward("ModelInfer", raw, metadata, request.model_name, candidates, _real_time(request))

    async def model_call(self, method: str, raw: bytes, context) -> bytes:
        name = pb.ModelMetadataRequest.FromString(raw).name  # (ModelConfigRequest has the same field)
        return await self._forward(method, raw, _metadata(context), name, self.view.spread(name), False)

    async def any_node(self, method: str, raw: bytes, context) -> bytes:
        return await self._forward(method, raw, _metadata(context), "", self.view.spread(None), False)

    async def _forward(self, method: str, raw: bytes, metadata, model: str, candidates: list[str], rt: bool) -> bytes:
        path = f"/{SERVICE}/{method}"

        async def send(node: NodeState):
            try:
                return await self._channel(node).unary_unary(path)(raw, metadata=metadata, timeout=self.timeout_s)
            except grpc.aio.AioRpcError as exc:
                return exc

        served = [n for n in candidates if self.view.nodes[n].address.grpc]
        answer = await self.view.forward(model, served, rt, send, _refused)
        if isinstance(answer, grpc.aio.AioRpcError):
            raise _NodeError(answer)
        return answer

    def _channel(self, node: NodeState) -> grpc.aio.Channel:
        name, address = node.address.name, node.address.grpc
        known = self._channels.get(name)
        if known is not None and known[0] == address:
            return known[1]
        for gone in [n for n in self._channels if n not in self.view.nodes or n == name]:
            self._spawn_close(self._channels.pop(gone)[1])
        channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        self._channels[name] = (address, channel)
        return channel

    def _spawn_close(self, channel: grpc.aio.Channel) -> None:
        asyncio.get_running_loop().create_task(channel.close())

    async def stream_infer(self, request_iterator, context):
        """Each request of the stream forwarded on its own and answered when its node answers, in
        any order; a failure as the answer's `error_message`. At most STREAM_UNSENT requests are
        read ahead of the answers the client has taken (as a front end's stream)."""
        rule = self.restrictions.grpc_rule("ModelStreamInfer") if self.restrictions else None
        if rule is not None and (refusal := rule.grpc_refusal(dict(context.invocation_metadata() or ()))):
            await context.abort(*refusal)
        metadata = _metadata(context)

        async def one(raw: bytes) -> bytes:
            try:
                answer = await self._infer(raw, metadata)
                return _STREAM_ANSWER_TAG + _length(len(answer)) + answer
            except (ApiError, _NodeError) as exc:
                return stream_error(_head(raw), exc.message).SerializeToString()
            except DecodeError as exc:
                return stream_error(pb.ModelInferRequest(), _unreadable(exc).message).SerializeToString()
            except Exception as exc:  # noqa: BLE001 - a bug: logged, and the request still answered
                message = internal_message(exc, "ModelStreamInfer")
                return stream_error(pb.ModelInferRequest(), message).SerializeToString()

        async for answer in stream_answers(request_iterator, one):
            yield answer

    async def close(self) -> None:
        await asyncio.gather(*(channel.close() for _, channel in self._channels.values()))


class _NodeError(Exception):
    """A node's error answer, passed on with its status code and message."""

    def __init__(self, error: grpc.aio.AioRpcError):
        super().__init__(error.details())
        self.code, self.message = error.code(), error.details() or ""


def _refused(answer) -> bool:
    return isinstance(answer, grpc.aio.AioRpcError) and answer.code() == grpc.StatusCode.UNAVAILABLE


def _real_time(request: pb.ModelInferRequest) -> bool:
    if "priority" not in request.parameters:
        return False
    value = request.parameters["priority"]
    which = value.WhichOneof("parameter_choice")
    return which is not None and real_time({"priority": getattr(value, which)})


def _metadata(context) -> tuple:
    return tuple((k, v) for k, v in context.invocation_metadata() or () if not k.startswith(_OWN_METADATA))


def _head(raw: bytes) -> pb.ModelInferRequest:
    """An infer message's fields but its tensors (inputs, outputs and raw contents skipped, not
    read): all that routing needs. DecodeError where it is not a message."""
    kept, pos = [], 0
    try:
        while pos < len(raw):
            start = pos
            tag, pos = read_varint(raw, pos)
            wire = tag & 7
            if wire == 2:  # length-delimited
                size, pos = read_varint(raw, pos)
                pos += size
            elif wire == 0:
                pos = read_varint(raw, pos)[1]
            elif wire in (1, 5):  # fixed 64 or 32 bits
                pos += 8 if wire == 1 else 4
            else:  # groups, unused by this message: protobuf reads it whole
                return pb.ModelInferRequest.FromString(raw)
            if tag >> 3 in _HEAD_FIELDS:
                kept.append(raw[start:pos])
    except IndexError:
        raise DecodeError("the message ends inside a field") from None
    if pos != len(raw):
        raise DecodeError("the message ends inside a field")
    return pb.ModelInferRequest.FromString(b"".join(kept))


def _unreadable(exc: DecodeError) -> ApiError:
    return ApiError(ErrorCode.INVALID_ARG, f"the request is not a valid protobuf message: {exc}")


def _length(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
