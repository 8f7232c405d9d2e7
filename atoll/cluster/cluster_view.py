"""What the endpoint knows of its nodes and does to them, whichever transport asked: each node's
health and repository index (refreshed every REFRESH_S, and at once after a model-control call),
the forwarding of a request to the node `routing` picks, retried on another node when one fails,
model control propagated to the nodes `placement` names (and, on every refresh, to nodes that joined
since), and the cluster's index, statistics and metrics (`aggregate`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from atoll.cluster import placement
from atoll.cluster.aggregate import merged_metrics, summed_statistics, union_index
from atoll.cluster.directory import Directory, NodeAddress
from atoll.cluster.node_client import Answer, NodeGone, NodeHttp
from atoll.cluster.routing import Router
from atoll.kserve.errors import ApiError, ErrorCode
from atoll.observe.throttled import Throttled

log = logging.getLogger(__name__)
REFRESH_S = 1.0  # between two refreshes of every node's health and index
ASK_TIMEOUT_S = 5.0  # a health, index, statistics or metrics call to a node
CONTROL_TIMEOUT_S = 600.0  # a load or unload on a node (a large model loads for minutes)
RETRIES = 2  # other nodes an inference request is tried on after the first fails
_ERRORS = {code.http: code for code in reversed(ErrorCode)}  # HTTP status -> its first kind


@dataclass
class NodeState:
    address: NodeAddress
    http: NodeHttp
    metrics: NodeHttp | None
    reachable: bool = False
    ready: bool = False
    index: tuple = ()  # its repository index's entries
    serving: frozenset = frozenset()  # (model, version) READY on it
    models: frozenset = frozenset()  # models READY on it

    def close(self) -> None:
        self.http.close()
        if self.metrics is not None:
            self.metrics.close()


@dataclass
class Placed:
    """A model loaded through the endpoint: the load's body for the nodes and its replica count."""

    body: bytes
    replicas: int | None


class EndpointMetrics:
    """The endpoint's own series, beside the nodes' ones at its metrics port."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.forwarded = Counter("atoll_cluster_forwarded", "requests forwarded to each node (retries included)",
                                 ["node"], registry=self.registry)  # fmt: skip
        self.retries = Counter("atoll_cluster_retries", "requests sent again to another node after one failed",
                               registry=self.registry)  # fmt: skip
        self.unavailable = Counter("atoll_cluster_unavailable", "requests the endpoint answered 503 / UNAVAILABLE: "
                                   "no node could take them", registry=self.registry)  # fmt: skip
        self.outstanding = Gauge("atoll_cluster_outstanding", "requests forwarded to each node and not yet answered",
                                 ["node", "priority"], registry=self.registry)  # fmt: skip
        self.node_ready = Gauge("atoll_cluster_node_ready", "1 where the node answers ready", ["node"],
                                registry=self.registry)  # fmt: skip
        self._forwarded: dict[str, Counter] = {}
        self._relayed: Callable[[], dict[str, int]] = dict
        self._relayed_seen: dict[str, int] = {}

    def relayed_by(self, relayed: Callable[[], dict[str, int]]) -> None:
        """Count in `forwarded`, at each scrape, what `relayed()` says was sent to each node since
        the start without Python (the native relay's first tries)."""
        self._relayed = relayed

    def sync(self) -> None:
        """`forwarded` brought up to date with what was relayed."""
        for node, sent in self._relayed().items():
            seen = self._relayed_seen.get(node, 0)
            if sent > seen:
                self.forwarded_to(node).inc(sent - seen)
                self._relayed_seen[node] = sent

    def forwarded_to(self, node: str) -> Counter:
        """`forwarded`'s series for `node`, looked up once (`labels` takes a lock and builds a key)."""
        series = self._forwarded.get(node)
        if series is None:
            series = self._forwarded[node] = self.forwarded.labels(node)
        return series


class ClusterView:
    """The nodes of `directory` as the endpoint sees them. `headers` go on every call the endpoint
    makes to a node on its own (the nodes' restricted-API keys); `replicas` is the default count
    per model (absent: every node)."""

    def __init__(self, directory: Directory, headers: Mapping[str, str] | None = None,
                 replicas: Mapping[str, int] | None = None):  # fmt: skip
        self.directory = directory
        self.headers = dict(headers or {})
        self.replicas = dict(replicas or {})
        self.nodes: dict[str, NodeState] = {}
        self.router = Router()
        self.metrics = EndpointMetrics()
        self.placed: dict[str, Placed] = {}
        self._tried: set[tuple[str, str]] = set()  # (model, node) loads placed since the node joined
        self._tasks: set[asyncio.Task] = set()
        self._warn = Throttled(log)
        self._watchers: list[Callable[[], None]] = []

    # -- the nodes' state -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Refresh every REFRESH_S, and give joining nodes what is placed on them, until cancelled."""
        while True:
            try:
                await self.refresh()
                self.reconcile()
            except Exception:  # a bug, or the directory failing: logged, and the next refresh tries again
                log.exception("refreshing the nodes failed")
            await asyncio.sleep(REFRESH_S)

    async def refresh(self) -> None:
        listed = {address.name: address for address in self.directory.nodes()}
        for name in [n for n, s in self.nodes.items() if listed.get(n) != s.address]:
            self._drop(name)
        for name, address in listed.items():
            if name not in self.nodes:
                metrics = NodeHttp(address.metrics) if address.metrics else None
                self.nodes[name] = NodeState(address, NodeHttp(address.http, address.local), metrics)
        await asyncio.gather(*(self.refresh_node(state) for state in list(self.nodes.values())))

    async def refresh_node(self, state: NodeState) -> None:
        try:
            health = await state.http.request("GET", "/v2/health/ready", self.headers, timeout_s=ASK_TIMEOUT_S)
            index = await state.http.request("POST", "/v2/repository/index", self.headers, b"{}",
                                             timeout_s=ASK_TIMEOUT_S)  # fmt: skip
            entries = json.loads(index.body) if index.status == 200 else None
            if not isinstance(entries, list):
                raise NodeGone(f"repository index answered {index.status}")
        except (NodeGone, TimeoutError, ValueError) as exc:
            self.node_failed(state.address.name, exc)
            return
        if not state.reachable:
            log.info("node %s (%s) is reachable", state.address.name, state.address.http)
        state.reachable, state.ready = True, health.status == 200
        state.index = tuple(entries)
        ready = [(e.get("name"), e.get("version", "")) for e in entries if e.get("state") == "READY"]
        state.serving = frozenset(ready)
        state.models = frozenset(name for name, _ in ready)
        self._changed()

    def node_failed(self, name: str, reason: BaseException | str) -> None:
        """`name` did not answer: no request goes to it until a refresh finds it again, and what is
        placed is given to it again then (it may have restarted empty)."""
        state = self.nodes.get(name)
        if state is None:
            return
        if state.reachable:
            log.warning("node %s (%s) does not answer: %s", name, state.address.http, reason)
        state.reachable = state.ready = False
        state.serving = state.models = frozenset()
        self._tried = {(m, n) for m, n in self._tried if n != name}
        self._changed()

    def _drop(self, name: str) -> None:
        log.info("node %s left the directory", name)
        self.node_failed(name, "left the directory")
        self.nodes.pop(name).close()
        self._changed()

    def watch(self, changed: Callable[[], None]) -> None:
        """Call `changed()` whenever a node's models or reachability may have changed (under the GIL,
        on the loop or a relay thread)."""
        self._watchers.append(changed)

    def _changed(self) -> None:
        for changed in self._watchers:
            changed()

    def reachable(self) -> list[str]:
        return [name for name, state in list(self.nodes.items()) if state.reachable]

    def candidates(self, model: str, version: str | None = None) -> list[str]:
        """The reachable nodes whose index says `model` (that version, where given) is READY."""
        nodes = list(self.nodes.items())  # (one step under the GIL: the relay's threads call this too)
        if version:
            return [n for n, s in nodes if (model, version) in s.serving]
        return [n for n, s in nodes if model in s.models]

    def routes(self) -> list[tuple[str, str, tuple[tuple[str, str], ...]]]:
        """Every (model, version) READY somewhere, with its candidates as `candidates` gives them and
        each one's `NodeHttp.relay_to`: version "" stands for a request that names none."""
        routes: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for name, state in list(self.nodes.items()):
            keys = [(m, "") for m in state.models] + [(m, v) for m, v in state.serving if v]
            for key in keys:
                routes.setdefault(key, []).append((name, state.http.relay_to))
        return sorted((model, version, tuple(nodes)) for (model, version), nodes in routes.items())

    def ready(self) -> bool:
        return any(state.ready for state in self.nodes.values())

    # -- forwarding -------------------------------------------------------------------------------------

    async def forward(self, model: str, candidates: list[str], real_time: bool,
                      send: Callable[[NodeState], Awaitable], refused: Callable[[object], bool]):  # fmt: skip
        """`send(node)`'s result from the node `routing` picks among `candidates`; where it fails
        (NodeGone) or the node refuses (`refused(result)`: it is starting, stopping or full), from
        another of them, up to RETRIES more. Then the last refusal, or ApiError UNAVAILABLE."""
        attempts = Attempts(self, model, candidates, real_time)
        last = None
        while (name := attempts.next()) is not None:
            try:
                result = await send(self.nodes[name])
            except NodeGone as exc:
                attempts.answered(name, exc)
                continue
            except BaseException:
                attempts.answered(name, None)
                raise
            attempts.answered(name, None)
            if not refused(result):
                return result
            last = result
        if last is not None:
            return last
        raise attempts.failure()

    def spread(self, model: str | None) -> list[str]:
        """Where a call about `model` goes that any node holding it can answer (metadata, config):
        those nodes, else any reachable one (it answers as a single server would)."""
        return (self.candidates(model) if model else []) or self.reachable()

    # -- model control --------------------------------------------------------------------------------

    async def load(self, model: str, parameters: dict) -> None:
        """Load `model` on the nodes `placement` names (`parameters`: Triton's load parameters and
        the endpoint's `replicas`); nodes beyond the replica count unload it. ApiError where no
        node could load it."""
        parameters = dict(parameters)
        try:
            replicas = placement.replicas_of(parameters, self.replicas.get(model))
        except ValueError as exc:
            raise ApiError(ErrorCode.INVALID_ARG, str(exc)) from None
        body = json.dumps({"parameters": parameters}).encode()
        live = self.reachable()
        if not live:
            raise ApiError(ErrorCode.UNAVAILABLE, "no node of the cluster is reachable", 1)
        self.placed[model] = Placed(body, replicas)
        self._tried = {(m, n) for m, n in self._tried if m != model}
        holding = {n for n in live if model in self.nodes[n].models}
        chosen = placement.targets(live, holding, replicas, self._models_held(live))
        self._tried.update((model, n) for n in chosen)
        extra = [n for n in holding if n not in chosen]
        answers = await asyncio.gather(*(self._control(n, model, "load", body) for n in chosen),
                                       *(self._control(n, model, "unload", b"") for n in extra))  # fmt: skip
        failures = [a for a in answers[: len(chosen)] if a is not None]
        if len(failures) == len(chosen):  # not loaded anywhere: not placed either
            self.placed.pop(model, None)
            raise failures[0]
        for name, failure in zip(chosen, answers):
            if failure is not None:
                self._warn.warning("node %s did not load %s: %s", name, model, failure.message)

    async def unload(self, model: str) -> None:
        """Unload `model` from every reachable node; it is no longer placed."""
        self.placed.pop(model, None)
        self._tried = {(m, n) for m, n in self._tried if m != model}
        live = self.reachable()
        if not live:
            raise ApiError(ErrorCode.UNAVAILABLE, "no node of the cluster is reachable", 1)
        failures = [a for a in await asyncio.gather(*(self._control(n, model, "unload", b"") for n in live)) if a]
        if len(failures) == len(live):
            raise failures[0]

    def reconcile(self) -> None:
        """Give each placed model to the nodes `placement` names that do not hold it and have not
        been given it since they joined (a node that joined, or came back empty)."""
        live = self.reachable()
        held = self._models_held(live)
        for model, placed in self.placed.items():
            holding = {n for n in live if model in self.nodes[n].models}
            for name in placement.targets(live, holding, placed.replicas, held):
                if name not in holding and (model, name) not in self._tried:
                    self._tried.add((model, name))
                    log.info("loading %s on node %s (placed on it)", model, name)
                    self._spawn(self._control(name, model, "load", placed.body))

    def _models_held(self, live: list[str]) -> dict[str, int]:
        return {name: len(self.nodes[name].models) for name in live}

    async def _control(self, name: str, model: str, action: str, body: bytes) -> ApiError | None:
        """Load or unload `model` on node `name`, then refresh its index; its failure, or None."""
        state = self.nodes[name]
        try:
            answer = await state.http.request("POST", f"/v2/repository/models/{model}/{action}", self.headers, body,
                                              timeout_s=CONTROL_TIMEOUT_S)  # fmt: skip
        except (NodeGone, TimeoutError) as exc:
            self.node_failed(name, exc)
            return ApiError(ErrorCode.UNAVAILABLE, f"node {name} did not answer the {action} of '{model}': {exc}")
        await self.refresh_node(state)
        return None if answer.status == 200 else node_error(answer)

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- what the cluster answers from every node -------------------------------------------------------

    def index(self, ready_only: bool) -> list[dict]:
        entries = union_index({name: list(s.index) for name, s in self.nodes.items() if s.reachable})
        return [e for e in entries if e.get("state") == "READY"] if ready_only else entries

    async def statistics(self, model: str = "", version: str = "") -> dict:
        """Triton's statistics summed over the nodes: of `model` over those serving it (where none
        does, a reachable node's own answer, an error), else of every model over every node."""
        path = "/v2/models/stats"
        if model:
            path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/stats"
        names = (self.candidates(model, version) if model else []) or self.reachable()
        answers = await asyncio.gather(*(self._ask(n, path) for n in names))
        good = [json.loads(a.body) for a in answers if a is not None and a.status == 200]
        if good:
            return summed_statistics(good)
        refusal = next((a for a in answers if a is not None), None)
        if refusal is not None:
            raise node_error(refusal)
        raise ApiError(ErrorCode.UNAVAILABLE, "no node of the cluster answered for its statistics", 1)

    async def metrics_text(self) -> str:
        """Every node's metrics with its `node` label, then the endpoint's own."""
        scraped = [(n, s) for n, s in self.nodes.items() if s.reachable and s.metrics is not None]
        answers = await asyncio.gather(*(self._scrape(s) for _, s in scraped))
        for name, state in self.nodes.items():
            self.metrics.node_ready.labels(name).set(state.ready)
        self.metrics.sync()
        for name, o in self.router.outstanding().items():
            self.metrics.outstanding.labels(name, "rt").set(o.real_time)
            self.metrics.outstanding.labels(name, "be").set(o.total - o.real_time)
        texts = [(name, text) for (name, _), text in zip(scraped, answers) if text]
        return merged_metrics(texts, generate_latest(self.metrics.registry).decode())

    async def _ask(self, name: str, path: str) -> Answer | None:
        try:
            return await self.nodes[name].http.request("GET", path, self.headers, timeout_s=ASK_TIMEOUT_S)
        except (NodeGone, TimeoutError) as exc:
            self.node_failed(name, exc)
            return None

    async def _scrape(self, state: NodeState) -> str:
        try:
            answer = await state.metrics.request("GET", "/metrics", timeout_s=ASK_TIMEOUT_S)
        except (NodeGone, TimeoutError) as exc:
            self._warn.warning("node %s: its metrics (%s) could not be read: %s", state.address.name,
                               state.address.metrics, exc)  # fmt: skip
            return ""
        return answer.body.decode(errors="replace") if answer.status == 200 else ""

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for state in self.nodes.values():
            state.close()


def node_error(answer: Answer) -> ApiError:
    """A node's error answer (`{"error": ...}` with Triton's status) as the same ApiError."""
    try:
        message = json.loads(answer.body)["error"]
    except (ValueError, KeyError, TypeError):
        message = answer.body.decode(errors="replace")[:500] or f"HTTP {answer.status}"
    return ApiError(_ERRORS.get(answer.status, ErrorCode.INTERNAL), str(message))


class Attempts:
    """The tries of one forwarded request, as `ClusterView.forward` makes them and as the native
    relay's threads step through them (`relay.py`): `next()` names the node to send to (None: no
    more), `answered` is called once for each, and `failure()` is the error when none answered.
    The router's counts change under a lock, since the relay's threads and the loop share them."""

    _lock = threading.Lock()

    def __init__(self, view: ClusterView, model: str, candidates: list[str], real_time: bool,
                 tried: tuple[str, ...] = ()):  # fmt: skip
        """`tried`: nodes already sent to and counted out (the native relay's first try)."""
        self.view = view
        self.model = model
        self.candidates = candidates
        self.real_time = real_time
        self.tried: list[str] = list(tried)
        self.gone: str | None = None  # the last failure, "node: reason"

    def next(self) -> str | None:
        view = self.view
        if len(self.tried) > RETRIES:
            return None
        with self._lock:
            name = view.router.choose([n for n in self.candidates if n not in self.tried and n in view.nodes],
                                      self.real_time)  # fmt: skip
            if name is None:
                return None
            view.router.sent(name, self.real_time)
        if self.tried:
            view.metrics.retries.inc()
        self.tried.append(name)
        view.metrics.forwarded_to(name).inc()
        return name

    def answered(self, name: str, gone: NodeGone | None) -> None:
        """`name` answered (or, `gone`, did not)."""
        with self._lock:
            self.view.router.answered(name, self.real_time)
        if gone is not None:
            self.view.node_failed(name, gone)
            self.gone = f"{name}: {gone}"

    def failure(self) -> ApiError:
        """Why no node answered (no refusal came either)."""
        view, model = self.view, self.model
        view.metrics.unavailable.inc()
        if not model:
            return ApiError(ErrorCode.UNAVAILABLE, f"no node of the cluster answered ({self.gone or 'none reachable'})",
                            1)  # fmt: skip
        if self.gone is not None:
            return ApiError(ErrorCode.UNAVAILABLE, f"no node of the cluster could answer for model '{model}' "
                                                   f"(tried {', '.join(self.tried)}; {self.gone})", 1)  # fmt: skip
        if not any(model == e.get("name") for s in list(view.nodes.values()) for e in s.index) and view.reachable():
            return ApiError(ErrorCode.NOT_FOUND, f"Request for unknown model: '{model}' is not found")
        return ApiError(ErrorCode.UNAVAILABLE, f"model '{model}' is not ready on any node of the cluster "
                                               f"({len(view.reachable())} of {len(view.nodes)} nodes reachable)", 1)
