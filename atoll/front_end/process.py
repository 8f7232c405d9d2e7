"""A front-end process's life: serve HTTP and gRPC on the shared ports over one `Endpoints` (and
its `FrontEnd`), make the changes the supervisor hands out (models added or retired, shared-memory
regions registered or dropped), until the supervisor says stop (or goes away), then answer what is
in flight and exit."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal

from gpu_runtime.priority import favour_real_time_threads, relay_this_thread

from atoll.front_end import grpc_service
from atoll.front_end.endpoints import Endpoints
from atoll.front_end.http_routes import InferenceServer
from atoll.front_end.rows import FrontEnd, FrontEndSetup
from atoll.http.bodies import BodyBudget, body_budget_bytes
from atoll.http.connections import HttpConnections, connection_bound, grpc_limits, raise_open_file_limit
from atoll.http.refusal_pace import RefusalPace
from atoll.kserve.errors import ApiError, ErrorCode
from atoll.kserve.shm_registry import CudaIpc, Regions, Register
from atoll.observe import native_stderr
from atoll.observe.metrics import Metrics
from atoll.wire import channel
from atoll.wire.channel import Applied, Apply, Done, Health, Hello, Reply, Stop
from atoll.wire.control import SupervisorLink
from atoll.wire.model_control import AddModel, RetireModel

log = logging.getLogger("atoll.front_end.rows")
LISTEN_BACKLOG = 4096


def front_end_main(setup: FrontEndSetup, sock) -> None:
    """Process entry point. Ctrl-C reaches the whole process group; the supervisor handles it and
    stops the front ends in order, so SIGINT is ignored here."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    favour_real_time_threads()
    native_stderr.capture()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s fe{setup.index} %(name)s: %(message)s")
    asyncio.run(_serve(setup, sock))


async def _serve(setup: FrontEndSetup, sock) -> None:
    c = setup.config
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    metrics = Metrics(setup.gpu_uuids)
    front_end = FrontEnd(setup, writer, metrics)
    regions = Regions(CudaIpc() if setup.gpu_uuids else None)
    for region in setup.regions:  # registered before this process started (it replaces one that died)
        try:
            regions.apply(Register(region))
        except ApiError as exc:  # its client removed or shrank the object: not a reason to die, again and again
            log.warning("shared memory region %r left out: %s", region.name, exc.message)
    share = c.server.pending_share(setup.count)
    supervisor = SupervisorLink(writer)
    endpoints = Endpoints(front_end, metrics, regions, supervisor, share, c.server.request_timeout_s)
    budget = BodyBudget(body_budget_bytes(c.server.body_memory_bytes, setup.count, c.server.max_request_bytes),
                        metrics.refused)  # fmt: skip
    server = InferenceServer(endpoints, metrics, c.server.body_timeout_s, budget)
    bound = connection_bound(c.server.max_connections, raise_open_file_limit())
    pace = RefusalPace(c.server.refusals_per_answer, endpoints.answer_rate, metrics.refusals_held)  # HTTP's and gRPC's
    http = server.http(c.server.max_request_bytes, HttpConnections(bound, metrics.evicted), c.server.idle_timeout_s,
                       pace)  # fmt: skip
    # An open loop past capacity connects faster than the loop accepts: beyond a backlog of 128
    # the kernel reset some of those connections (15 of 5,724 requests in 13 s at 1,024 req/s of
    # tensors on the 2-core VM; none in two runs with 4096, which somaxconn caps anyway).
    await http.listen(c.server.host, setup.port, LISTEN_BACKLOG, reuse_port=True)
    grpc = None
    if setup.grpc_port is not None:
        grpc = await grpc_service.start(endpoints, c.server.host, setup.grpc_port, c.server.max_request_bytes,
                                       grpc_limits(bound, c.server.idle_timeout_s), pace)  # fmt: skip
    relay_this_thread()  # this loop passes every request on, real-time ones among them
    writer.write(channel.encode(Hello(setup.index, os.getpid())))
    # What start-up made lives as long as the process: frozen, the collector's full passes skip its
    # ~200,000 objects (the collector had ~4 % of this loop's samples under overload, `perf`).
    gc.freeze()
    endpoints.ready = True
    stopping = asyncio.Event()
    changes = _Changes(setup.index, writer, front_end, regions, c.server.request_timeout_s)
    listener = asyncio.create_task(_listen(reader, front_end, endpoints, supervisor, changes, stopping))
    try:
        await stopping.wait()
        endpoints.ready = False
        # both answer what they hold first: Done messages still arrive meanwhile
        await asyncio.gather(http.shutdown(c.server.request_timeout_s),
                             *([grpc.stop(c.server.request_timeout_s)] if grpc is not None else []))
    finally:
        listener.cancel()
        writer.close()
        front_end.close()
        regions.close()


class _Changes:
    """Makes the supervisor's changes (`channel.Apply`) and says when each is made."""

    def __init__(self, index: int, writer, front_end: FrontEnd, regions: Regions, timeout_s: float):
        self.index, self.writer, self.front_end, self.regions = index, writer, front_end, regions
        self.timeout_s = timeout_s
        self._running: set[asyncio.Task] = set()

    def start(self, message: Apply) -> None:
        task = asyncio.create_task(self._apply(message))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _apply(self, message: Apply) -> None:
        error = None
        try:
            match message.change:
                case AddModel(spec=spec, arenas=arenas):
                    self.front_end.add_model(spec, arenas[self.index])
                case RetireModel(name=name):
                    await self.front_end.retire_model(name, self.timeout_s)
                case change:
                    self.regions.apply(change)
        except ApiError as exc:
            error = exc
        except Exception as exc:  # a bug: the supervisor's caller gets it
            log.exception("change %r failed", message.change)
            error = ApiError(ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        if not self.writer.is_closing():
            self.writer.write(channel.encode(Applied(message.id, error)))


async def _listen(reader: asyncio.StreamReader, front_end: FrontEnd, endpoints: Endpoints,
                  supervisor: SupervisorLink, changes: _Changes, stopping: asyncio.Event) -> None:
    while (message := await channel.receive(reader)) is not None:
        match message:
            case Done():
                front_end.on_done(message)
            case Health(ready_models=models):
                endpoints.ready_models = models
            case Reply():
                supervisor.answered(message)
            case Apply():
                changes.start(message)
            case Stop():
                stopping.set()
    supervisor.gone()
    stopping.set()  # the supervisor is gone
