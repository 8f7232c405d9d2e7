"""The endpoint's KServe v2 HTTP routes, on Atoll's own HTTP/1.1 edge (`atoll.http.edge`): an infer
request's body goes to the chosen node as it was received (only the JSON part before the binary
tensors is read, for the request's `priority`), and the node's answer comes back as it was sent.
Repository index, statistics and metrics are the cluster's (`ClusterView`); model control goes to
the nodes placement names; shared memory is refused: its regions live on one machine.
"""

from __future__ import annotations

from atoll.cluster.cluster_view import ClusterView, NodeState
from atoll.cluster.node_client import Answer
from atoll.cluster.routing import real_time
from atoll.http.kserve_api import json_body, kserve_routes
from atoll.http.messages import HttpRequest, HttpResponse, Routes, error
from atoll.kserve.errors import ApiError, ErrorCode
from atoll.kserve.json_tensors import sliced_sync
from atoll.kserve.protocol import (
    HEADER_LENGTH,
    ProtocolError,
    request_parameters,
    request_skeleton,
)
from atoll.kserve.restricted import Restrictions

SHARED_MEMORY_REFUSAL = ("shared memory is not available through the cluster endpoint: a region lives on one "
                         "machine and a request may be served by any node; send the tensors in the request, or "
                         "register the region with one node and send to that node")  # fmt: skip
# headers of one hop, not passed on: the edge undid any Content-Encoding, and lengths are the sender's
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host", "expect",
        "te", "trailer", "upgrade", "proxy-connection"}  # fmt: skip
_ANSWER_HOP = HOP | {"content-type"}
_HEADER_LENGTH = HEADER_LENGTH.lower()
OK = HttpResponse(200)


class HttpProxy:
    """The routes of the endpoint's HTTP port over `view`; `restrictions` (`kserve.restricted`)
    refuses restricted calls without their header; `timeout_s` bounds a forwarded request."""

    def __init__(self, view: ClusterView, restrictions: Restrictions, timeout_s: float):
        self.view = view
        self.restrictions = restrictions
        self.timeout_s = timeout_s

    def routes(self) -> Routes:
        any_node = self.any_node
        handlers = {"live": self.live, "server_ready": self.ready, "server_metadata": any_node,
                    "repository_index": self.repository_index, "load": self.load, "unload": self.unload,
                    "statistics": self.statistics, "model_metadata": any_node, "model_ready": self.model_ready,
                    "model_config": any_node, "infer": self.infer, "region_status": self.region_status,
                    "register": self.register, "unregister": self.unregister, "trace_or_logging": any_node}  # fmt: skip
        r = kserve_routes(handlers, self.restrictions)
        r.add("GET", "/metrics", self.metrics)
        return r

    # -- the cluster's own answers ------------------------------------------------------------------

    async def live(self, request: HttpRequest) -> HttpResponse:
        return OK

    async def ready(self, request: HttpRequest) -> HttpResponse:
        return OK if self.view.ready() else HttpResponse(503)

    async def model_ready(self, request: HttpRequest) -> HttpResponse:
        if self.view.candidates(request.params["model"], request.params.get("version")):
            return OK
        return error(400, "Model version not ready")

    async def repository_index(self, request: HttpRequest) -> HttpResponse:
        ready = json_body(request).get("ready", False)
        return HttpResponse.json(self.view.index(bool(ready)))

    async def load(self, request: HttpRequest) -> HttpResponse:
        parameters = json_body(request).get("parameters") or {}
        if not isinstance(parameters, dict):
            raise ApiError(ErrorCode.INVALID_ARG, "load 'parameters' must be a JSON object")
        await self.view.load(request.params["model"], parameters)
        return OK

    async def unload(self, request: HttpRequest) -> HttpResponse:
        await self.view.unload(request.params["model"])
        return OK

    async def statistics(self, request: HttpRequest) -> HttpResponse:
        params = request.params
        return HttpResponse.json(await self.view.statistics(params.get("model", ""), params.get("version", "")))

    async def metrics(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse(body=(await self.view.metrics_text()).encode())

    async def region_status(self, request: HttpRequest) -> HttpResponse:
        if "region" in request.params:
            raise ApiError(ErrorCode.NOT_FOUND, f"Unable to find shared memory region: '{request.params['region']}'"
                                                f" ({SHARED_MEMORY_REFUSAL})")  # fmt: skip
        return HttpResponse.json([])

    async def register(self, request: HttpRequest) -> HttpResponse:
        raise ApiError(ErrorCode.UNSUPPORTED, SHARED_MEMORY_REFUSAL)

    async def unregister(self, request: HttpRequest) -> HttpResponse:
        return OK  # nothing is registered here

    # -- forwarded to a node --------------------------------------------------------------------------

    async def infer(self, request: HttpRequest) -> HttpResponse:
        model, version = request.params["model"], request.params.get("version")
        return await self._forward(request, model, self.view.candidates(model, version), _real_time(request))

    async def any_node(self, request: HttpRequest) -> HttpResponse:
        """A call any node can answer (for a model: one holding it), answered as that node does."""
        model = request.params.get("model")
        return await self._forward(request, model or "", self.view.spread(model), False)

    async def _forward(self, request: HttpRequest, model: str, candidates: list[str], rt: bool) -> HttpResponse:
        headers = {name: value for name, value in request.headers.items() if name not in HOP}
        target = request.path + ("?" + request.query if request.query else "")

        method = "GET" if request.method == "HEAD" else request.method  # (the edge leaves the body out)

        async def send(node: NodeState) -> Answer:
            return await node.http.request(method, target, headers, request.body, self.timeout_s)

        try:
            answer = await self.view.forward(model, candidates, rt, send, _refused)
        except TimeoutError:
            raise self.timed_out() from None
        return _response(answer)

    def timed_out(self) -> ApiError:
        return ApiError(ErrorCode.TIMEOUT, f"the node did not answer within {self.timeout_s:g} s")


def _refused(answer: Answer) -> bool:
    return answer.status == 503


def _response(answer: Answer) -> HttpResponse:
    headers = {name.title(): value for name, value in answer.headers.items() if name not in _ANSWER_HOP}
    return HttpResponse(answer.status, answer.body, answer.headers.get("content-type", "text/plain"), headers or None)


def _real_time(request: HttpRequest) -> bool:
    value = request.headers.get(_HEADER_LENGTH)
    try:
        length = int(value) if value else None
    except ValueError:
        return False
    return real_time_in(request.body, length)


def real_time_in(body: bytes, json_length: int | None) -> bool:
    """Whether an infer request's `body` (its JSON part the first `json_length` bytes; None: all
    of it) asks for real-time service, from its JSON part alone (the body with every input's data
    skipped, not decoded); a request that cannot be read is routed as best-effort, and the node
    answers what is wrong with it."""
    try:
        if body.find(b'"priority"', 0, len(body) if json_length is None else json_length) < 0:
            return False  # most requests: no JSON read at all (an escaped key goes best-effort)
        skeleton = sliced_sync(request_skeleton(body, json_length))
        return real_time(request_parameters(skeleton.fields))
    except (ProtocolError, ValueError):
        return False
