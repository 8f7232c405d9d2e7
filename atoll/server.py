"""KServe v2 / Triton HTTP server (aiohttp) over a model repository, plus Prometheus metrics.

Endpoints follow the KServe v2 inference protocol with Triton's binary tensor extension, so
`tritonclient.http` works unchanged. Every front-end process runs one, on the shared port, over its
`front_end.FrontEnd`. Every accepted request gets exactly one response: bad input is a 400 with a
reason, an unknown model or version a 404, overload a 503 with Retry-After (`admission.py`; never a
silent drop), and every error is JSON (`http_edge.py`). Real-time and best-effort requests are
admitted against separate bounds, so best-effort overload never refuses a real-time request. A
client that goes away cancels its request (counted as CANCELED, logged at INFO), and rows of it not
yet run are dropped from the dispatcher's queues. Readiness follows the supervisor's word on which
models have a live vGPU worker (`set_ready_models`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from aiohttp import web

from fpga_host.status import PreprocessError
from gpu_runtime.priority import Priority

from atoll import __version__
from atoll.admission import Admission
from atoll.channel import Failure
from atoll.front_end import RowFailed, priority_of
from atoll.http_edge import BodyError, error as _error, json_errors, read_body
from atoll.pipeline import MediaError
from atoll.protocol import HEADER_LENGTH, ProtocolError, binary_outputs, decode_request, encode_response
from atoll.repository import ModelSpec

log = logging.getLogger("atoll.server")
EXTENSIONS = ["binary_tensor_data", "model_repository"]


# How a row the dispatcher could not run is answered: (HTTP status, failure reason in metrics).
FAILURES = {Failure.EXPIRED: (504, "TIMEOUT"), Failure.REJECTED: (400, "REJECTED"),
            Failure.BACKEND: (500, "BACKEND")}  # fmt: skip


class InferenceServer:
    def __init__(self, front_end, models: dict[str, ModelSpec], metrics, max_pending: int = 0,
                 timeout_s: float = 120.0, body_timeout_s: float = 30.0):
        """`max_pending`: a fixed bound per priority on top of admission's (0: none)."""
        self.front_end = front_end
        self.models = models
        self.metrics = metrics
        self.timeout_s = timeout_s
        self.body_timeout_s = body_timeout_s
        self.admission = {priority: Admission(timeout_s, max_pending) for priority in Priority}
        self.ready = False  # listening, and not stopping
        self.ready_models: set[str] = set()  # the models some vGPU worker can run now
        self.max_request_bytes = 0
        self._counters: dict[str, tuple] = {}

    def set_ready_models(self, models: set[str]) -> None:
        self.ready_models = set(models)

    def app(self, max_request_bytes: int) -> web.Application:
        self.max_request_bytes = max_request_bytes
        app = web.Application(client_max_size=max_request_bytes, middlewares=[json_errors])
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

    def _serving(self, model: str) -> bool:
        return self.ready and model in self.ready_models

    async def health_ready(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if all(self._serving(m) for m in self.models) else 503)

    async def server_metadata(self, request: web.Request) -> web.Response:
        return web.json_response({"name": "atoll", "version": __version__, "extensions": EXTENSIONS})

    async def repository_index(self, request: web.Request) -> web.Response:
        return web.json_response([
            {"name": m.name, "version": m.version, "state": "READY"} if self._serving(m.name) else
            {"name": m.name, "version": m.version, "state": "UNAVAILABLE", "reason": "no live vGPU worker"}
            for m in self.models.values()])  # fmt: skip

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
        return web.Response(status=200 if self._serving(self._model(request).name) else 503)

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
        spec = self._model(request)
        labels = (spec.name, spec.version)
        if not self.ready:
            return _error(503, "server is starting")
        start = time.perf_counter()
        try:
            body = await read_body(request, self.max_request_bytes, self.body_timeout_s)
            header = request.headers.get(HEADER_LENGTH)
            req = decode_request(body, int(header) if header else None)
            priority = priority_of(spec, req)
        except BodyError as exc:
            self.metrics.failure.labels(*labels, "REJECTED").inc()
            return exc.response()
        except (ProtocolError, ValueError) as exc:
            self.metrics.failure.labels(*labels, "REJECTED").inc()
            return _error(400, str(exc))
        admission = self.admission[priority]
        if (refusal := admission.refuse(time.monotonic())) is not None:
            self.metrics.refused.inc()
            self.metrics.failure.labels(*labels, "OVERLOAD").inc()
            return _error(503, refusal.reason, {"Retry-After": str(refusal.retry_after_s)})
        admission.started(time.monotonic())
        self.metrics.in_flight.inc()
        answered = True
        try:
            outputs = await asyncio.wait_for(
                self.front_end.infer(spec, req, priority, time.monotonic() + self.timeout_s), self.timeout_s)
            names, binary = binary_outputs(req, list(outputs))
            payload, headers = encode_response(spec.name, spec.version, req.id,
                                               {n: outputs[n] for n in names}, binary)  # fmt: skip
        except (ProtocolError, MediaError, PreprocessError, ValueError) as exc:
            self.metrics.failure.labels(*labels, "REJECTED").inc()
            return _error(400, str(exc))
        except RowFailed as exc:
            status, reason = FAILURES[exc.failure]
            self.metrics.failure.labels(*labels, reason).inc()
            return _error(status, str(exc))
        except TimeoutError:
            answered = False
            self.metrics.failure.labels(*labels, "TIMEOUT").inc()
            return _error(504, f"no answer within {self.timeout_s:g} s")
        except asyncio.CancelledError:  # the client went away: nobody to answer, nothing wrong here
            answered = False
            self.metrics.failure.labels(*labels, "CANCELED").inc()
            log.info("%s request cancelled: the client closed its connection", spec.name)
            raise
        except Exception as exc:  # a batch or worker failure: reported, never swallowed
            log.exception("inference failed for %s", spec.name)
            self.metrics.failure.labels(*labels, "BACKEND").inc()
            return _error(500, f"inference failed: {exc}")
        finally:
            admission.finished(time.monotonic(), answered)
            self.metrics.in_flight.dec()
        success, request_us = self._per_model(spec)
        success.inc()
        request_us.inc((time.perf_counter() - start) * 1e6)
        return web.Response(body=payload, headers=headers)

    def _per_model(self, spec: ModelSpec):
        """The model's per-request counters (a labels() lookup costs more than the increment)."""
        counters = self._counters.get(spec.name)
        if counters is None:
            labels = (spec.name, spec.version)
            counters = self._counters[spec.name] = (self.metrics.success.labels(*labels),
                                                    self.metrics.request_us.labels(*labels))
        return counters
