"""What each KServe v2 / Triton endpoint answers, whatever the transport.

The HTTP routes (`http_routes.py`) and the gRPC service (`grpc_service.py`) decode calls and encode
answers; everything between is here, once: the model table, readiness, admission per priority
(`admission.Admission`, so best-effort overload never refuses real-time work), the request timeout
and deadline, outputs (classification, shared memory), per-model metrics, and errors as `ApiError`s
with Triton's codes. Every accepted request gets exactly one answer; a client that goes away cancels
its request (counted as CANCELED, not as a server failure). Readiness holds only while this front end
serves and a vGPU worker can run the model (`channel.Health`). Calls only the supervisor can answer
(repository index, load and unload, shared-memory registration) go to it (`control.SupervisorLink`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import numpy as np
from fpga_host.status import PreprocessError
from gpu_runtime.priority import Priority

from atoll import __version__
from atoll.front_end.admission import Admission
from atoll.front_end.ensembles import run_ensemble
from atoll.front_end.media import MediaError
from atoll.front_end.rows import RowFailed, check_tensor, priority_of
from atoll.kserve.classification import classify
from atoll.kserve.errors import ApiError, ErrorCode
from atoll.kserve.protocol import (
    InferRequest,
    InputHead,
    Output,
    ProtocolError,
    join_bytes,
    requested_outputs,
    shared_memory_of,
)
from atoll.kserve.shm_registry import CudaRegion, Register, SystemRegion, Unregister
from atoll.kserve.statistics import model_statistics
from atoll.observe.throttled import Throttled
from atoll.repository.specs import ModelSpec
from atoll.repository.versions import pick, served_key
from atoll.wire.channel import Failure
from atoll.wire.model_control import IndexModels, LoadModel, UnloadModel

log = logging.getLogger(__name__)
EXTENSIONS = ["classification", "model_repository", "model_configuration", "system_shared_memory",
              "binary_tensor_data", "parameters", "statistics"]  # fmt: skip

# How a row the dispatcher could not run is answered: (error kind, failure reason in metrics).
FAILURES = {Failure.EXPIRED: (ErrorCode.TIMEOUT, "TIMEOUT"), Failure.REJECTED: (ErrorCode.INVALID_ARG, "REJECTED"),
            Failure.BACKEND: (ErrorCode.INTERNAL, "BACKEND"),
            Failure.CANCELLED: (ErrorCode.UNAVAILABLE, "CANCELED"),
            Failure.QUEUE_FULL: (ErrorCode.UNAVAILABLE, "REJECTED"),
            Failure.QUEUE_TIMEOUT: (ErrorCode.UNAVAILABLE, "REJECTED")}  # fmt: skip


class Refused(ApiError):
    """An overload refusal (503 with Retry-After)."""


class Endpoints:
    def __init__(self, front_end, metrics, regions, supervisor=None, max_pending: int = 0,
                 timeout_s: float = 120.0):
        """`front_end` (`rows.FrontEnd`) holds the models and runs requests; `regions`
        (`shm_registry.Regions`) the mapped shared-memory regions; `supervisor` passes calls on;
        `max_pending` (> 0) is a fixed bound per priority on top of admission's."""
        self.front_end = front_end
        self.metrics = metrics
        self.regions = regions
        self.supervisor = supervisor
        self.timeout_s = timeout_s
        self.admission = {priority: Admission(timeout_s, max_pending) for priority in Priority}
        self.ready = False  # listening, and not stopping
        self.ready_models: frozenset[str] = frozenset()  # those some vGPU worker can run now
        self._gone = Throttled(log)  # requests whose clients went away

    # -- server and models --------------------------------------------------------------------------

    def server_metadata(self) -> dict:
        cuda = ["cuda_shared_memory"] if self.regions.cuda is not None else []
        return {"name": "atoll", "version": __version__, "extensions": EXTENSIONS + cuda}

    def versions(self, name: str) -> dict[str, ModelSpec]:
        """The served versions of model `name`, by version."""
        return {s.version: s for s in self.front_end.models.values() if s.name == name}

    def find(self, name: str, version: str | None) -> ModelSpec | None:
        """The served version a call of model `name` reaches (`versions.pick`), None if none."""
        return pick(self.versions(name), version)

    def model(self, name: str, version: str | None = None) -> ModelSpec:
        spec = self.find(name, version)
        if spec is None and version not in (None, "") and self.versions(name):
            raise ApiError(ErrorCode.NOT_FOUND, f"Request for unknown model: '{name}' version {version} is not found")
        if spec is None:
            raise ApiError(ErrorCode.NOT_FOUND, f"Request for unknown model: '{name}' is not found")
        return spec

    def decoupled(self, name: str, version: str | None = None) -> bool:
        """Whether a call of model `name` reaches a version that answers a request any number of
        times (a decoupled Python model)."""
        spec = self.find(name, version)
        return spec is not None and spec.python is not None and spec.python.decoupled

    def metadata(self, name: str, version: str | None = None) -> dict:
        """A model's metadata; its `versions` are those served (Triton's answer)."""
        return self.model(name, version).metadata() | {"versions": sorted(self.versions(name), key=int)}

    def serving(self, key: str) -> bool:
        """A served version (`ModelSpec.key`) can run now."""
        return self.ready and key in self.ready_models

    def server_ready(self) -> bool:
        return self.ready and all(self.serving(spec.key) for spec in self.front_end.models.values())

    def model_ready(self, name: str, version: str | None = None) -> bool:
        spec = self.find(name, version)
        return spec is not None and self.serving(spec.key)

    def statistics(self, name: str = "", version: str = "") -> dict:
        """Triton's statistics: of every served version, of each version of `name`, or of one."""
        if not name:
            specs = list(self.front_end.models.values())
        else:
            specs = list(self.versions(name).values())
            if not specs:
                raise ApiError(ErrorCode.INVALID_ARG, f"requested model '{name}' is not available")
            if version:
                specs = [s for s in specs if s.version == version]
                if not specs:
                    raise ApiError(ErrorCode.INVALID_ARG, f"requested model version is not available for model '{name}'")
        models = sorted((s.name, s.version) for s in specs)
        return model_statistics(self.metrics.families(), models)

    # -- calls the supervisor answers ---------------------------------------------------------------

    async def repository_index(self, ready: bool = False) -> list[dict]:
        index = []
        for entry in await self.supervisor.ask(IndexModels(ready)):
            if entry.get("state") == "READY" and not self.serving(served_key(entry["name"], entry["version"])):
                if ready:
                    continue
                entry = {**entry, "state": "UNAVAILABLE", "reason": "no live vGPU worker"}
            index.append(entry)
        return index

    async def load(self, name: str, parameters: dict) -> None:
        if not isinstance(parameters, dict):
            raise ApiError(ErrorCode.INVALID_ARG, "load 'parameters' must be a JSON object")
        await self.supervisor.ask(LoadModel(name, parameters))  # checked by the supervisor (load_request.py)

    async def unload(self, name: str) -> None:
        await self.supervisor.ask(UnloadModel(name))

    async def register(self, region: SystemRegion | CudaRegion) -> None:
        if region.kind == "cuda" and self.regions.cuda is None:
            raise ApiError(ErrorCode.UNSUPPORTED, f"failed to register CUDA shared memory region '{region.name}': "
                                                  "this server has no GPU vGPUs (use system shared memory)")  # fmt: skip
        await self.supervisor.ask(Register(region))

    async def unregister(self, kind: str, name: str | None) -> None:
        """Without GPU vGPUs no CUDA region is ever registered: their registry answers empty, as
        clients that unregister every region to start clean expect."""
        await self.supervisor.ask(Unregister(kind, name or None))

    def region_status(self, kind: str, name: str | None) -> list[dict]:
        return self.regions.status(kind, name or None)

    # -- inference ----------------------------------------------------------------------------------

    async def infer(self, name: str, version: str | None, decode: Callable[[], Awaitable[InferRequest]],
                    parameters: Callable[[], Awaitable[dict]] | None = None,
                    on_response: Callable[[list[Output] | str], None] | None = None,
                    ) -> tuple[ModelSpec, InferRequest, list[Output]]:
        """Run one request of model `name`, whose body `decode` reads; its outputs as requested.
        A decoupled model (Python backend) answers only where `on_response` takes its responses
        (each its outputs as requested, or an error message; the gRPC stream), and returns none.
        `parameters`, where given, reads the request's parameters alone and cheaply (HTTP: its JSON
        fields but the inputs' data): a request that admission refuses is then refused before its
        tensors are decoded, which under overload is most requests."""
        spec = self.model(name, version)
        decoupled = spec.python is not None and spec.python.decoupled
        if decoupled != (on_response is not None):
            unsupported(f"model '{name}' uses the decoupled transaction policy: one answer per request" if decoupled
                        else "several answers to a request of a model that is not decoupled")  # fmt: skip
        if not self.ready:
            raise ApiError(ErrorCode.UNAVAILABLE, "server is starting or stopping")
        counters = self.metrics.of(spec.name, spec.version)
        start = time.perf_counter()
        admission = None  # decided before the decode where the parameters come first
        try:
            if parameters is not None:
                admission = self._refuse_if_full(spec, priority_of(spec, await parameters()), start)
                admission.started(time.monotonic())  # its place held while its tensors are decoded (in slices)
            try:
                request = await decode()
                priority = priority_of(spec, request.parameters)
                wanted = self._wanted(spec, request)
            except BaseException:
                if admission is not None:
                    admission.finished(time.monotonic(), False)
                raise
        except ProtocolError as exc:
            raise self._failed(spec, start, "REJECTED", ApiError(ErrorCode.INVALID_ARG, str(exc))) from None
        except Refused:  # counted as such already
            raise
        except ApiError as exc:
            raise self._failed(spec, start, "REJECTED", exc) from None
        if admission is None:
            admission = self._refuse_if_full(spec, priority, start)
            admission.started(time.monotonic())
        self.metrics.in_flight.inc()
        counters.pending.inc()
        answered = True  # the server did the request's work (admission's rate counts it)
        try:
            deadline = time.monotonic() + self.timeout_s
            streamed = None if on_response is None else lambda got: on_response(
                got if isinstance(got, str) else [self._output(spec, out, params, got[out]) for out, params in wanted
                                                  if out in got])  # fmt: skip
            if spec.ensemble is not None:
                running = run_ensemble(spec, request, self._step)
            else:
                running = (self.front_end.infer(spec, request, priority, deadline) if streamed is None
                           else self.front_end.infer(spec, request, priority, deadline, streamed))  # fmt: skip
            async with asyncio.timeout(self.timeout_s):  # this task's own timer: no task of its own per request
                outputs = await running
            answer = [] if on_response is not None else [self._output(spec, out, params, outputs[out])
                                                         for out, params in wanted]  # fmt: skip
        except (ProtocolError, MediaError, PreprocessError, ValueError) as exc:
            raise self._failed(spec, start, "REJECTED", ApiError(ErrorCode.INVALID_ARG, str(exc))) from None
        except ApiError as exc:
            raise self._failed(spec, start, "REJECTED", exc) from None
        except RowFailed as exc:
            code, reason = FAILURES[exc.failure]
            raise self._failed(spec, start, reason, ApiError(code, str(exc))) from None
        except TimeoutError:
            answered = False
            raise self._failed(spec, start, "TIMEOUT", ApiError(
                ErrorCode.TIMEOUT, f"no answer within {self.timeout_s:g} s")) from None
        except asyncio.CancelledError:  # the client went away: nobody to answer, nothing wrong here
            answered = False
            self._failed(spec, start, "CANCELED", None)
            self._gone.info("%s request cancelled: the client went away (at most one such line every 10 s; "
                            "nv_inference_request_failure{reason=\"CANCELED\"} counts them)", spec.name)
            raise
        except Exception as exc:  # a batch or worker failure: reported, never swallowed
            log.exception("inference failed for %s", spec.name)
            raise self._failed(spec, start, "BACKEND", ApiError(ErrorCode.INTERNAL, f"inference failed: {exc}")) from None
        finally:
            admission.finished(time.monotonic(), answered)
            self.metrics.in_flight.dec()
            counters.pending.dec()
        counters.success.inc()
        counters.request_us.inc((time.perf_counter() - start) * 1e6)
        counters.last_inference.set(time.time() * 1e3)
        return spec, request, answer

    async def _step(self, name: str, version: str | None, request: InferRequest) -> list[Output]:
        """One step of an ensemble: a request of its own to the step's model."""

        async def decode() -> InferRequest:
            return request

        _, _, outputs = await self.infer(name, version, decode)
        return outputs

    def answer_rate(self) -> float | None:
        """Requests answered a second while any were in hand, both priorities (admission's
        measure); None before the first answer."""
        rates = [rate for admission in self.admission.values() if (rate := admission.rate) is not None]
        return sum(rates) if rates else None

    def refused_now(self, spec: ModelSpec | None, parameters: dict) -> Refused | None:
        """The 503 a request of `spec` (as `find` gives it) with these `parameters` gets at once
        under overload (counted as `infer` counts its refusals), or None, when `infer` is to
        decide: it is admitted, or it gets another error."""
        if spec is None or not self.ready:
            return None
        try:
            self._refuse_if_full(spec, priority_of(spec, parameters), time.perf_counter())
        except ProtocolError:
            return None
        except Refused as exc:
            return exc
        return None

    def refused_input(self, spec: ModelSpec | None, heads: list[InputHead]) -> ApiError | None:
        """The 400 a request of `spec` (as `find` gives it) gets from its inputs' fields alone,
        before their data (counted as `infer` counts its refusals), or None, when `infer` is to
        decide."""
        if spec is None:
            return None
        try:
            for head in heads:
                check_input(spec, head)
        except ProtocolError as exc:
            return self._failed(spec, time.perf_counter(), "REJECTED", ApiError(ErrorCode.INVALID_ARG, str(exc)))
        return None

    def _refuse_if_full(self, spec: ModelSpec, priority: Priority, start: float) -> Admission:
        """The admission of `priority`, or the 503 it answers now (`admission.Admission.refuse`)."""
        admission = self.admission[priority]
        if (refusal := admission.refuse(time.monotonic())) is not None:
            self.metrics.refused.inc()
            raise self._failed(spec, start, "OVERLOAD", Refused(ErrorCode.UNAVAILABLE, refusal.reason,
                                                                refusal.retry_after_s))  # fmt: skip
        return admission

    def _failed(self, spec: ModelSpec, start: float, reason: str, error: ApiError | None) -> ApiError | None:
        self.metrics.failure.labels(spec.name, spec.version, reason).inc()
        self.metrics.of(spec.name, spec.version).failure_us.inc((time.perf_counter() - start) * 1e6)
        return error

    def _wanted(self, spec: ModelSpec, request: InferRequest) -> list[tuple[str, dict]]:
        """The outputs to answer with, checked before any work is done."""
        wanted = requested_outputs(request, [t.name for t in spec.outputs])
        for name, params in wanted:
            count = params.get("classification", 0)
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ProtocolError(f"output {name!r}: classification must be a non-negative integer")
            ref = shared_memory_of(params, f"output {name!r}")
            if ref is not None:
                self.regions.check(ref)
        return wanted

    def _output(self, spec: ModelSpec, name: str, params: dict, array: np.ndarray) -> Output:
        tensor = next(t for t in spec.outputs if t.name == name)
        if tensor.reshape is not None:  # the config's dims, from the graph's (Triton's `reshape`)
            array = array.reshape(array.shape[:1] + tensor.dims if spec.max_batch_size > 0 else tensor.dims)
        if params.get("classification"):
            array = classify(array, params["classification"], spec.labels.get(name, ()), spec.max_batch_size > 0)
        out = Output.of(name, array, params)
        ref = shared_memory_of(params, f"output {name!r}")
        if ref is not None:
            data = np.frombuffer(join_bytes(array), np.uint8) if out.datatype == "BYTES" else array
            self.regions.write(ref, np.ascontiguousarray(data), name)
            out.data = None
        return out


def check_input(spec: ModelSpec, head: InputHead) -> None:
    """An input's datatype and shape against the model's, from its fields alone, as the rows
    (`rows.FrontEnd`) will check its tensor: a mismatch costs no parse of its data. Inputs the model
    does not read are left to the rows."""
    if spec.preprocess != "none" and head.name == spec.raw_input:
        if head.datatype != "BYTES":
            raise ProtocolError(f"input {head.name!r} must be BYTES (a {spec.preprocess} file)")
        return
    want = next((t for t in spec.inputs if t.name == head.name), None)
    if want is not None:
        check_tensor(spec, want, head.datatype, tuple(head.shape))


def unsupported(what: str):
    raise ApiError(ErrorCode.UNSUPPORTED, f"{what} is not supported")
