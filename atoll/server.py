"""KServe v2 / Triton HTTP server (aiohttp) over a model repository, plus Prometheus metrics.

Endpoints follow the KServe v2 inference protocol with Triton's binary tensor extension, so
`tritonclient.http` works unchanged. Every accepted request gets exactly one response: bad input is a
400 with a reason, an unknown model or version a 404, overload a 503 (never a silent drop).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from aiohttp import web

from atoll import __version__
from atoll.protocol import HEADER_LENGTH, ProtocolError, binary_outputs, decode_request, encode_response
from atoll.repository import ModelSpec

log = logging.getLogger("atoll.server")
EXTENSIONS = ["binary_tensor_data", "model_repository"]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


class InferenceServer:
    def __init__(self, pipeline, models: dict[str, ModelSpec], metrics, max_pending: int = 1024,
                 timeout_s: float = 120.0):
        self.pipeline = pipeline
        self.models = models
        self.metrics = metrics
        self.max_pending = max_pending
        self.timeout_s = timeout_s
        self.pending = 0
        self.ready = False

    def app(self, max_request_bytes: int) -> web.Application:
        app = web.Application(client_max_size=max_request_bytes)
        r = app.router
        r.add_get("/v2/health/live", self.live)
        r.add_get("/v2/health/ready", self.health_ready)
        r.add_get("/v2", self.server_metadata)
        r.add_post("/v2/repository/index", self.repository_index)
        for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
            r.add_get(prefix, self.model_metadata)
            r.add_get(prefix + "/ready", self.model_ready)
            r.add_get(prefix + "/config", self.model_config)
            r.add_post(prefix + "/infer", self.infer)
        r.add_get("/metrics", self.metrics_text)
        return app

    # -- health and metadata ----------------------------------------------------------------------

    async def live(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def health_ready(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.ready else 503)

    async def server_metadata(self, request: web.Request) -> web.Response:
        return web.json_response({"name": "atoll", "version": __version__, "extensions": EXTENSIONS})

    async def repository_index(self, request: web.Request) -> web.Response:
        return web.json_response(
            [{"name": m.name, "version": m.version, "state": "READY"} for m in self.models.values()]
        )

    def _model(self, request: web.Request) -> ModelSpec:
        name = request.match_info["model"]
        spec = self.models.get(name)
        version = request.match_info.get("version")
        if spec is None:
            message = f"unknown model {name!r}"
        elif version not in (None, "", spec.version):
            message = f"model {name!r} has no version {version!r}"
        else:
            return spec
        raise web.HTTPNotFound(text=json.dumps({"error": message}), content_type="application/json")

    async def model_metadata(self, request: web.Request) -> web.Response:
        return web.json_response(self._model(request).metadata())

    async def model_ready(self, request: web.Request) -> web.Response:
        self._model(request)
        return web.Response(status=200 if self.ready else 503)

    async def model_config(self, request: web.Request) -> web.Response:
        spec = self._model(request)

        def tensors(ts):
            return [{"name": t.name, "data_type": "TYPE_" + t.datatype.replace("BYTES", "STRING"),
                     "dims": list(t.dims)} for t in ts]  # fmt: skip

        return web.json_response({
            "name": spec.name, "platform": spec.platform, "max_batch_size": spec.max_batch_size,
            "input": tensors(spec.inputs), "output": tensors(spec.outputs),
            "parameters": {k: {"string_value": v} for k, v in spec.parameters.items()},
        })  # fmt: skip

    async def metrics_text(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain")

    # -- inference --------------------------------------------------------------------------------

    async def infer(self, request: web.Request) -> web.Response:
        from fpga_host.status import PreprocessError

        from atoll.pipeline import MediaError

        spec = self._model(request)
        labels = (spec.name, spec.version)
        if not self.ready:
            return _error(503, "server is starting")
        if self.pending >= self.max_pending:
            self.metrics.refused.inc()
            self.metrics.failure.labels(*labels, "OVERLOAD").inc()
            return _error(503, f"overloaded: {self.pending} requests in flight")
        self.pending += 1
        self.metrics.in_flight.inc()
        start = time.perf_counter()
        try:
            body = await request.read()
            header = request.headers.get(HEADER_LENGTH)
            req = decode_request(body, int(header) if header else None)
            outputs = await asyncio.wait_for(self.pipeline.infer(spec, req), self.timeout_s)
            names, binary = binary_outputs(req, list(outputs))
            payload, headers = encode_response(spec.name, spec.version, req.id,
                                               {n: outputs[n] for n in names}, binary)  # fmt: skip
        except (ProtocolError, MediaError, PreprocessError, ValueError) as exc:
            self.metrics.failure.labels(*labels, "REJECTED").inc()
            return _error(400, str(exc))
        except TimeoutError:
            self.metrics.failure.labels(*labels, "TIMEOUT").inc()
            return _error(504, f"no answer within {self.timeout_s:g} s")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a batch or worker failure: reported, never swallowed
            log.exception("inference failed for %s", spec.name)
            self.metrics.failure.labels(*labels, "BACKEND").inc()
            return _error(500, f"inference failed: {exc}")
        finally:
            self.pending -= 1
            self.metrics.in_flight.dec()
        self.metrics.success.labels(*labels).inc()
        self.metrics.request_us.labels(*labels).inc((time.perf_counter() - start) * 1e6)
        return web.Response(body=payload, headers=headers)
