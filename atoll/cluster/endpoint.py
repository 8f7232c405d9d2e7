"""The cluster's one KServe v2 endpoint: an asyncio process serving HTTP (Atoll's own edge, its infer
requests relayed by C threads: `relay.py`), gRPC (grpc.aio) and Prometheus metrics, forwarding each
request to a node that has its model loaded. It is Atoll's own proxy, not Ray Serve's, because the
entry's cost per request decides the design (Ray Serve's proxy's and this one's, measured:
docs/cluster.md, "The endpoint").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Mapping

import grpc

from atoll.cluster.cluster_view import ClusterView
from atoll.cluster.directory import Directory
from atoll.cluster.grpc_proxy import GrpcProxy
from atoll.cluster.heap import tune_heap
from atoll.cluster.http_proxy import HttpProxy
from atoll.cluster.relay import InferRelay
from atoll.config import Config
from atoll.http.bodies import BodyBudget, BodyLimits, body_budget_bytes
from atoll.http.connections import (
    HttpConnections,
    connection_bound,
    grpc_limits,
    raise_open_file_limit,
)
from atoll.http.edge import HttpServer
from atoll.http.messages import Routes
from atoll.kserve.grpc_calls import STREAM_WINDOW_BYTES
from atoll.kserve.restricted import Restrictions
from atoll.supervisor.lifecycle import serve_forever
from atoll.supervisor.process_settings import HEAP_TUNING, METRICS_BODY_BYTES, METRICS_CONNECTIONS
from gpu_runtime.native import NativeBuildError

log = logging.getLogger(__name__)
FORWARD_MARGIN_S = 10.0  # a forward waits the node's own request timeout and this much more


class Endpoint:
    """The endpoint's servers over `directory`, configured by `config.server` as `atoll serve` is
    (host, ports, body and connection limits, drain, restricted APIs: applied here, and their HTTP
    header keys sent on the endpoint's own calls to the nodes, which may restrict too); `restrictions`
    given replace the config's; `replicas` is the default replica count per model. `start()`/`stop()`
    as `serve_forever` wants them. ValueError for a malformed restricted-API group."""

    def __init__(self, directory: Directory, config: Config, restrictions: Restrictions | None = None,
                 replicas: Mapping[str, int] | None = None):  # fmt: skip
        self.config = config
        c = config.server
        self.restrictions = restrictions or Restrictions.parse(c.http_restricted_api, c.grpc_restricted_protocol)
        keys = {rule.name: rule.value for rule in self.restrictions.http.values()}
        self.view = ClusterView(directory, keys, replicas)
        timeout_s = config.server.request_timeout_s + FORWARD_MARGIN_S
        self.http = HttpProxy(self.view, self.restrictions, timeout_s)
        self.grpc = GrpcProxy(self.view, self.restrictions, timeout_s)
        self.http_url = self.grpc_address = self.metrics_url = ""
        self._servers: list[HttpServer] = []
        self._grpc_server: grpc.aio.Server | None = None
        self._refreshing: asyncio.Task | None = None
        self._relay: InferRelay | None = None

    async def start(self) -> None:
        c = self.config.server
        tune_heap(HEAP_TUNING)  # as `atoll serve`'s processes: each forwarded body reuses heap pages
        await self.view.refresh()
        self._refreshing = asyncio.get_running_loop().create_task(self.view.run())
        budget = BodyBudget(body_budget_bytes(c.body_memory_bytes, 1, c.max_request_bytes))
        bound = connection_bound(c.max_connections, raise_open_file_limit())
        http = HttpServer(self.http.routes(), BodyLimits(c.max_request_bytes, c.body_timeout_s, budget),
                          HttpConnections(bound), c.idle_timeout_s)  # fmt: skip
        port = self._relayed(http, budget.total, bound) if c.endpoint_relay == "native" else None
        self.http_url = f"http://{c.host}:{port or await self._listen(http, c.http_port)}"
        if c.metrics_port >= 0:
            routes = Routes()
            routes.add("GET", "/metrics", self.http.metrics)
            metrics = HttpServer(routes, BodyLimits(METRICS_BODY_BYTES, c.body_timeout_s),
                                 HttpConnections(METRICS_CONNECTIONS, name="metrics"), c.idle_timeout_s)  # fmt: skip
            self.metrics_url = f"http://{c.host}:{await self._listen(metrics, c.metrics_port)}"
        if c.grpc_port >= 0:
            self._grpc_server = grpc.aio.server(options=[
                ("grpc.max_receive_message_length", c.max_request_bytes), ("grpc.max_send_message_length", -1),
                ("grpc.http2.lookahead_bytes", STREAM_WINDOW_BYTES),
                *grpc_limits(bound, c.idle_timeout_s)])  # fmt: skip
            self._grpc_server.add_generic_rpc_handlers((self.grpc.handler(),))
            address = f"[{c.host}]:{c.grpc_port}" if ":" in c.host else f"{c.host}:{c.grpc_port}"
            port = self._grpc_server.add_insecure_port(address)
            if port == 0:
                raise OSError(f"gRPC cannot listen on {address}")
            await self._grpc_server.start()
            self.grpc_address = f"{c.host}:{port}"
        log.info("cluster endpoint: %d nodes listed, %d reachable", len(self.view.nodes), len(self.view.reachable()))

    def _relayed(self, http: HttpServer, budget: int, bound: int) -> int | None:
        """Serve the HTTP port through the native relay (`relay.InferRelay`), `http` taking what it
        hands on: its port, or None where the relay cannot be built (the port is then `http`'s)."""
        c = self.config.server
        sock = socket.create_server((c.host, c.http_port), family=socket.AF_INET6 if ":" in c.host else socket.AF_INET,
                                    backlog=100)  # fmt: skip
        try:
            self._relay = InferRelay(self.http, http, sock, c.max_request_bytes, budget, c.idle_timeout_s,
                                     c.body_timeout_s, bound, tuple(c.endpoint_node_congestion))  # fmt: skip
        except NativeBuildError as exc:
            sock.close()
            log.warning("the endpoint's native relay is not available, every HTTP request is served on its event loop: "
                        "%s", exc)  # fmt: skip
            return None
        self._servers.append(http)
        return sock.getsockname()[1]

    async def _listen(self, server: HttpServer, port: int) -> int:
        listener = await server.listen(self.config.server.host, port)
        self._servers.append(server)
        return listener.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Accept no more; answer what is in hand for up to `server.drain_s`, then close."""
        drain_s = self.config.server.drain_s
        waits = [server.shutdown(drain_s) for server in self._servers]
        if self._relay is not None:
            waits.append(self._relay.stop(drain_s))
        if self._grpc_server is not None:
            waits.append(self._grpc_server.stop(drain_s))
        await asyncio.gather(*waits)
        if self._refreshing is not None:
            self._refreshing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refreshing
        await self.grpc.close()
        await self.view.close()


def serve_endpoint(directory: Directory, config: Config, restrictions: Restrictions | None = None,
                   replicas: Mapping[str, int] | None = None) -> None:  # fmt: skip
    """Serve the endpoint (`Endpoint`'s arguments) until SIGINT or SIGTERM; its ready line is
    `atoll serve`'s ("atoll: serving on http://... and grpc://..."), so `ServerProcess.READY` finds
    its ports."""
    asyncio.run(serve_forever(Endpoint(directory, config, restrictions, replicas)))

