"""KServe v2 / Triton HTTP server (aiohttp) over a front end's `endpoints.Endpoints`, plus metrics.

Endpoints follow the KServe v2 inference protocol with Triton's extensions (binary tensors, system
and CUDA shared memory, model repository and control, statistics, classification), so
`tritonclient.http` works unchanged. Every front-end process runs one, on the shared port. Every
failure, an unknown endpoint or an extension this server does not support included, is answered
with JSON `{"error": ...}` and Triton's HTTP status for its kind (`errors.ErrorCode`); bodies are
read within a size and a time limit (`http_edge.py`).
"""

from __future__ import annotations

import base64
import binascii

from aiohttp import web

from atoll.endpoints import Endpoints, unsupported
from atoll.errors import ApiError, ErrorCode
from atoll.http_edge import BodyBudget, error, json_errors, read_body
from atoll.protocol import HEADER_LENGTH, ProtocolError, binary_outputs, decode_request, encode_response, json_object
from atoll.shm_registry import CudaRegion, SystemRegion

SHM_KINDS = {"systemsharedmemory": "system", "cudasharedmemory": "cuda"}


def _fields(doc: dict, *names: str) -> list:
    try:
        return [doc[name] for name in names]
    except KeyError as exc:
        raise ApiError(ErrorCode.INVALID_ARG, f"missing field {exc}") from None


class InferenceServer:
    def __init__(self, endpoints: Endpoints, metrics, body_timeout_s: float = 30.0, budget: BodyBudget | None = None):
        self.endpoints = endpoints
        self.metrics = metrics
        self.body_timeout_s = body_timeout_s
        self.budget = budget  # request bodies held at once (None: no bound)
        self.max_request_bytes = 0

    def app(self, max_request_bytes: int) -> web.Application:
        self.max_request_bytes = max_request_bytes
        middlewares = [json_errors] if self.budget is None else [json_errors, self.budget.middleware]
        app = web.Application(client_max_size=max_request_bytes, middlewares=middlewares)
        r = app.router
        r.add_get("/v2/health/live", self.live)
        r.add_get("/v2/health/ready", self.health_ready)
        r.add_get("/v2", self.server_metadata)
        r.add_post("/v2/repository/index", self.repository_index)
        r.add_post("/v2/repository/models/{model}/load", self.load)
        r.add_post("/v2/repository/models/{model}/unload", self.unload)
        r.add_get("/v2/models/stats", self.statistics)
        for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
            r.add_get(prefix, self.model_metadata)
            r.add_get(prefix + "/ready", self.model_ready)
            r.add_get(prefix + "/config", self.model_config)
            r.add_get(prefix + "/stats", self.statistics)
            r.add_post(prefix + "/infer", self.infer)
        for kind in SHM_KINDS:
            r.add_get(f"/v2/{kind}/status", self.region_status)
            r.add_get(f"/v2/{kind}/region/{{region}}/status", self.region_status)
            r.add_post(f"/v2/{kind}/region/{{region}}/register", self.register)
            r.add_post(f"/v2/{kind}/unregister", self.unregister)
            r.add_post(f"/v2/{kind}/region/{{region}}/unregister", self.unregister)
        for path in ("/v2/trace/setting", "/v2/models/{model}/trace/setting", "/v2/logging"):
            r.add_route("*", path, self.unsupported)
        r.add_get("/metrics", self.metrics_text)
        return app

    # -- health, metadata, statistics ---------------------------------------------------------------

    async def live(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def health_ready(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.endpoints.server_ready() else 503)

    async def server_metadata(self, request: web.Request) -> web.Response:
        return web.json_response(self.endpoints.server_metadata())

    async def model_metadata(self, request: web.Request) -> web.Response:
        return web.json_response(self._model(request).metadata())

    async def model_config(self, request: web.Request) -> web.Response:
        return web.json_response(self._model(request).config())

    async def model_ready(self, request: web.Request) -> web.Response:
        if self.endpoints.model_ready(request.match_info["model"], request.match_info.get("version")):
            return web.Response(status=200)
        return error(400, "Model version not ready")

    async def statistics(self, request: web.Request) -> web.Response:
        info = request.match_info
        return web.json_response(self.endpoints.statistics(info.get("model", ""), info.get("version", "")))

    async def metrics_text(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain")

    async def unsupported(self, request: web.Request) -> web.Response:
        unsupported(f"{request.path}")

    def _model(self, request: web.Request):
        return self.endpoints.model(request.match_info["model"], request.match_info.get("version"))

    async def _json_body(self, request: web.Request) -> dict:
        """A call's JSON object body (empty when there is none)."""
        raw = await read_body(request, self.max_request_bytes, self.body_timeout_s, self.budget)
        if not raw:
            return {}
        try:
            return json_object(raw, "request body")
        except ProtocolError as exc:
            raise ApiError(ErrorCode.INVALID_ARG, str(exc)) from None

    # -- repository and shared memory ---------------------------------------------------------------

    async def repository_index(self, request: web.Request) -> web.Response:
        ready = (await self._json_body(request)).get("ready", False)
        return web.json_response(await self.endpoints.repository_index(bool(ready)))

    async def load(self, request: web.Request) -> web.Response:
        parameters = (await self._json_body(request)).get("parameters") or {}
        await self.endpoints.load(request.match_info["model"], parameters)
        return web.Response(status=200)

    async def unload(self, request: web.Request) -> web.Response:
        await self.endpoints.unload(request.match_info["model"])
        return web.Response(status=200)

    async def region_status(self, request: web.Request) -> web.Response:
        kind = SHM_KINDS[request.path.split("/")[2]]
        return web.json_response(self.endpoints.region_status(kind, request.match_info.get("region")))

    async def register(self, request: web.Request) -> web.Response:
        name, doc = request.match_info["region"], await self._json_body(request)
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
        return web.Response(status=200)

    async def unregister(self, request: web.Request) -> web.Response:
        kind = SHM_KINDS[request.path.split("/")[2]]
        await self.endpoints.unregister(kind, request.match_info.get("region"))
        return web.Response(status=200)

    # -- inference ----------------------------------------------------------------------------------

    async def infer(self, request: web.Request) -> web.Response:
        async def decode():
            body = await read_body(request, self.max_request_bytes, self.body_timeout_s, self.budget)
            header = request.headers.get(HEADER_LENGTH)
            try:
                length = int(header) if header else None
            except ValueError:
                raise ProtocolError(f"{HEADER_LENGTH} {header!r} is not a number") from None
            return decode_request(body, length, self.endpoints.regions)

        info = request.match_info
        spec, req, outputs = await self.endpoints.infer(info["model"], info.get("version"), decode)
        payload, headers = encode_response(spec.name, spec.version, req.id, outputs, binary_outputs(req, outputs))
        return web.Response(body=payload, headers=headers)
