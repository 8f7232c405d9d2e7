"""KServe v2 / Triton HTTP server (`edge.HttpServer`) over a front end's `endpoints.Endpoints`, plus metrics.

Endpoints follow the KServe v2 inference protocol with Triton's extensions (binary tensors, system
and CUDA shared memory, model repository and control, statistics, classification), so
`tritonclient.http` works unchanged. Every front-end process runs one, on the shared port. Every
failure, an unknown endpoint or an extension this server does not support included, is answered
with JSON `{"error": ...}` and Triton's HTTP status for its kind (`errors.ErrorCode`); bodies are
read within a size and a time limit (`http/edge.py`).
"""

from __future__ import annotations

import base64
import binascii
from concurrent.futures import ThreadPoolExecutor

from atoll.front_end.endpoints import Endpoints, check_input, unsupported
from atoll.http.bodies import BodyBudget, BodyLimits
from atoll.http.connections import HttpConnections
from atoll.http.edge import HttpServer
from atoll.http.kserve_api import json_body, kserve_routes
from atoll.http.messages import HttpRequest, HttpResponse, Routes, api_error, error
from atoll.http.refusal_pace import RefusalPace
from atoll.kserve.errors import ApiError, ErrorCode
from atoll.kserve.json_tensors import SLICE_BYTES, Incomplete, Skeleton, Span, decoded_bytes, sliced, sliced_sync
from atoll.kserve.protocol import (
    HEADER_LENGTH,
    ProtocolError,
    binary_outputs,
    decoding,
    encode_response,
    input_head,
    request_parameters,
    request_skeleton,
)
from atoll.kserve import routes
from atoll.kserve.restricted import Restrictions
from atoll.kserve.shm_registry import CudaRegion, SystemRegion

SHM_KINDS = {segment: segment.removesuffix("sharedmemory") for segment in routes.SHM_KINDS}  # -> "system", "cuda"
_HEADER_LENGTH = HEADER_LENGTH.lower()
OK = HttpResponse(200)


def _fields(doc: dict, *names: str) -> list:
    try:
        return [doc[name] for name in names]
    except KeyError as exc:
        raise ApiError(ErrorCode.INVALID_ARG, f"missing field {exc}") from None


class InferenceServer:
    def __init__(self, endpoints: Endpoints, metrics, body_timeout_s: float = 30.0, budget: BodyBudget | None = None,
                 restrictions: Restrictions | None = None):
        self.endpoints = endpoints
        self.restrictions = restrictions or Restrictions.none()  # Triton's --http-restricted-api
        self.metrics = metrics
        self.body_timeout_s = body_timeout_s
        self.budget = budget  # request bodies (and what JSON ones decode to) held at once (None: no bound)
        # JSON bodies are parsed here a slice at a time, off the loop (a SCHED_FIFO relay): its
        # threads, started from the loop's, are ordinary (SCHED_RESET_ON_FORK)
        self.parsing = ThreadPoolExecutor(1, thread_name_prefix="atoll-json")

    def http(self, max_request_bytes: int, connections: HttpConnections, idle_timeout_s: float = 300.0,
             pace: RefusalPace | None = None) -> HttpServer:
        """The HTTP server of these endpoints, its connections held by `connections`, its 503s paced
        by `pace`."""
        limits = BodyLimits(max_request_bytes, self.body_timeout_s, self.budget)
        return HttpServer(self.routes(), limits, connections, idle_timeout_s, pace)

    def routes(self) -> Routes:
        handlers = {"live": self.live, "server_ready": self.health_ready, "server_metadata": self.server_metadata,
                    "repository_index": self.repository_index, "load": self.load, "unload": self.unload,
                    "statistics": self.statistics, "model_metadata": self.model_metadata,
                    "model_ready": self.model_ready, "model_config": self.model_config, "infer": self.infer,
                    "region_status": self.region_status, "register": self.register, "unregister": self.unregister,
                    "trace_or_logging": self.unsupported}  # fmt: skip
        r = kserve_routes(handlers, self.restrictions, {"infer": self.refused_early})
        r.add("GET", "/metrics", self.metrics_text)
        return r

    # -- health, metadata, statistics ---------------------------------------------------------------

    async def live(self, request: HttpRequest) -> HttpResponse:
        return OK

    async def health_ready(self, request: HttpRequest) -> HttpResponse:
        return OK if self.endpoints.server_ready() else HttpResponse(503)

    async def server_metadata(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse.json(self.endpoints.server_metadata())

    async def model_metadata(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse.json(self.endpoints.metadata(request.params["model"], request.params.get("version")))

    async def model_config(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse.json(self._model(request).config())

    async def model_ready(self, request: HttpRequest) -> HttpResponse:
        if self.endpoints.model_ready(request.params["model"], request.params.get("version")):
            return OK
        return error(400, "Model version not ready")

    async def statistics(self, request: HttpRequest) -> HttpResponse:
        info = request.params
        return HttpResponse.json(self.endpoints.statistics(info.get("model", ""), info.get("version", "")))

    async def metrics_text(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse(body=self.metrics.render())

    async def unsupported(self, request: HttpRequest) -> HttpResponse:
        unsupported(f"{request.path}")

    def _model(self, request: HttpRequest):
        return self.endpoints.model(request.params["model"], request.params.get("version"))

    # -- repository and shared memory ---------------------------------------------------------------

    async def repository_index(self, request: HttpRequest) -> HttpResponse:
        ready = json_body(request).get("ready", False)
        return HttpResponse.json(await self.endpoints.repository_index(bool(ready)))

    async def load(self, request: HttpRequest) -> HttpResponse:
        parameters = json_body(request).get("parameters") or {}
        await self.endpoints.load(request.params["model"], parameters)
        return OK

    async def unload(self, request: HttpRequest) -> HttpResponse:
        await self.endpoints.unload(request.params["model"])
        return OK

    async def region_status(self, request: HttpRequest) -> HttpResponse:
        kind = SHM_KINDS[request.path.split("/")[2]]
        return HttpResponse.json(self.endpoints.region_status(kind, request.params.get("region")))

    async def register(self, request: HttpRequest) -> HttpResponse:
        name, doc = request.params["region"], json_body(request)
        if SHM_KINDS[request.path.split("/")[2]] == "system":
            key, offset, size = _fields(doc, "key", "offset", "byte_size")
            region = SystemRegion(name, key, offset, size)
        else:
            handle, device, size = _fields(doc, "raw_handle", "device_id", "byte_size")
            try:
                raw = base64.b64decode(handle["b64"], validate=True)
            except (TypeError, KeyError, binascii.Error):
                raise ApiError(ErrorCode.INVALID_ARG, "'raw_handle' must be a valid base64 encoded "
                                                      "cudaIpcMemHandle_t") from None  # fmt: skip
            region = CudaRegion(name, raw, device, size)
        await self.endpoints.register(region)
        return OK

    async def unregister(self, request: HttpRequest) -> HttpResponse:
        kind = SHM_KINDS[request.path.split("/")[2]]
        await self.endpoints.unregister(kind, request.params.get("region"))
        return OK

    # -- inference ----------------------------------------------------------------------------------

    def refused_early(self, request: HttpRequest, prefix: memoryview) -> HttpResponse | None:
        """A refusal read from the body's first bytes: an input whose fields (before its data)
        do not fit the model (400), or, where they hold the whole JSON header of a binary-extension
        request, an overload (503). The rest of the body is then dropped as it arrives, never
        gathered nor parsed (`edge.Connection`)."""
        spec = self.endpoints.find(request.params["model"], request.params.get("version"))
        try:
            length = _header_length(request)
            whole = length is not None and length <= len(prefix)
            seen = _prefix_skeleton(bytes(prefix[:length] if whole else prefix), length)
            if whole:  # the whole JSON header: `infer` reads its parameters from it, not again
                request.seen = seen
            refusal = self.endpoints.refused_input(spec, [
                input_head(fields) for fields in seen.inputs or () if {"name", "datatype", "shape"} <= fields.keys()])
            if refusal is None and whole:
                refusal = self.endpoints.refused_now(spec, request_parameters(seen.fields))
        except ProtocolError:
            return None  # `infer` answers it
        return None if refusal is None else api_error(refusal)

    async def infer(self, request: HttpRequest) -> HttpResponse:
        info = request.params
        body = _InferBody(request, self, info["model"], info.get("version"))
        spec, req, outputs = await self.endpoints.infer(info["model"], info.get("version"), body.decode, body.parameters)
        payload, headers = encode_response(spec.name, spec.version, req.id, outputs, binary_outputs(req, outputs))
        return HttpResponse(200, payload, headers.pop("Content-Type"), headers or None)


def _prefix_skeleton(prefix: bytes, header_length: int | None) -> Skeleton:
    """What a body's first bytes tell of its JSON (its inputs' fields as far as they go)."""
    try:
        whole = header_length is not None and header_length <= len(prefix)
        return sliced_sync(request_skeleton(prefix, header_length if whole else None, whole))
    except Incomplete as stop:
        return stop.args[0]


class _InferBody:
    """An infer request's body, read as `Endpoints.infer` asks for it: the parameters first (its
    JSON but the inputs' data), the tensors only once it is admitted, each input's fields checked
    against the model and what its data will take counted in the body budget before any data is
    parsed. A JSON part of at most one slice (the binary extension's header, a small body) is parsed
    at once on the loop, where a hop to the parsing thread would cost more than the parse; a larger
    one a slice at a time, off the loop."""

    def __init__(self, request: HttpRequest, server: InferenceServer, model: str, version: str | None):
        self.request, self.server = request, server
        self.model, self.version = model, version
        self._skeleton: Skeleton | None = None

    async def parameters(self) -> dict:
        self._skeleton = self.request.seen
        if self._skeleton is None:
            self._skeleton = await self._run(request_skeleton(self.request.body, _header_length(self.request)))
        return request_parameters(self._skeleton.fields)

    def _check(self, skeleton: Skeleton, heads) -> None:
        spec = self.server.endpoints.model(self.model, self.version)
        for head in heads:
            check_input(spec, head)
        spans = [(head, fields["data"]) for head, fields in zip(heads, skeleton.inputs) if isinstance(fields.get("data"), Span)]
        if spans and self.server.budget is not None:
            self.server.budget.reserve(self.request, sum(decoded_bytes(h.datatype, h.count, span) for h, span in spans))

    async def decode(self):
        steps = decoding(self.request.body, _header_length(self.request), self.server.endpoints.regions,
                         self._skeleton, self._check)  # fmt: skip
        return await self._run(steps)

    async def _run(self, steps):
        json_bytes = _header_length(self.request) or len(self.request.body)
        if json_bytes <= SLICE_BYTES:
            return sliced_sync(steps)
        return await sliced(steps, self.server.parsing)


def _header_length(request: HttpRequest) -> int | None:
    """The binary extension's JSON header length (`Inference-Header-Content-Length`), or None when
    the whole body is JSON."""
    value = request.headers.get(_HEADER_LENGTH)
    try:
        return int(value) if value else None
    except ValueError:
        raise ProtocolError(f"{HEADER_LENGTH} {value!r} is not a number") from None
