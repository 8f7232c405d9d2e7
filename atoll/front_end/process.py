"""A front-end process's life: serve HTTP and gRPC on the shared ports over one `Endpoints` (and
its `FrontEnd`), make the changes the supervisor hands out (models added or retired, shared-memory
regions registered or dropped), until the supervisor says stop (or goes away); then refuse new
requests (503) and answer those in flight for up to `server.drain_s`, close every connection, exit.
It says Hello once it listens and knows which models can run (the supervisor's first message), so
a server whose front ends have all said Hello answers readiness truly."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket

from gpu_runtime.native import NativeBuildError
from gpu_runtime.priority import favour_real_time_threads, relay_this_thread
from gpu_runtime.thread_names import name_this_thread

from atoll.front_end import grpc_service
from atoll.front_end.colocated import LocalModels
from atoll.front_end.endpoints import Endpoints
from atoll.front_end.intake import NativeIntake
from atoll.front_end.http_routes import InferenceServer
from atoll.front_end.rows import FrontEnd, FrontEndSetup
from atoll.http.bodies import BodyBudget, body_budget_bytes
from atoll.http.connections import HttpConnections, connection_bound, grpc_limits, raise_open_file_limit
from atoll.http.edge import HttpServer
from atoll.http.refusal_pace import RefusalPace
from atoll.kserve.errors import INTERNAL_ERROR, ApiError, ErrorCode
from atoll.kserve.restricted import Restrictions
from atoll.kserve.shm_registry import CudaIpc, Regions, Register
from atoll.observe import native_stderr
from atoll.observe.log_format import configure_logging
from atoll.observe.metrics import Metrics
from atoll.wire import channel
from atoll.wire.channel import Applied, Apply, Done, Health, Hello, Reply, Stop
from atoll.wire.control import SupervisorLink
from atoll.wire.model_control import AddModel, RetireModel
from atoll.wire.responses import Response
from atoll.wire.rt_bounds import RtBounds

log = logging.getLogger(__name__)
# An open loop past capacity connects faster than the server accepts: beyond a backlog of 128 the
# kernel reset some of those connections (measured: docs/data-plane.md).
LISTEN_BACKLOG = 4096
DRAIN_POLL_S = 0.02  # how often a stopping front end looks whether its requests are all answered


def front_end_main(setup: FrontEndSetup, sock) -> None:
    """Process entry point. Ctrl-C and a service manager's SIGTERM reach the whole process group; the
    supervisor handles them and stops the front ends in order (it starts them with both signals
    blocked), so SIGINT is ignored here too."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    name_this_thread(f"atoll-fe{setup.index}")  # its loop: HTTP/gRPC, admission, answers
    favour_real_time_threads()
    native_stderr.capture()
    configure_logging(who=f"fe{setup.index} ")  # the supervisor's format
    asyncio.run(_serve(setup, sock))


async def _serve(setup: FrontEndSetup, sock) -> None:
    c = setup.config
    messages = _Messages()
    writer, frames = await channel.connect(sock, messages.handle)
    metrics = Metrics(setup.gpu_uuids)
    front_end = FrontEnd(setup, channel.Outbox(writer), metrics)
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
    restrictions = Restrictions.parse(c.server.http_restricted_api, c.server.grpc_restricted_protocol)
    server = InferenceServer(endpoints, metrics, c.server.body_timeout_s, budget, restrictions)
    bound = connection_bound(c.server.max_connections, raise_open_file_limit())
    pace = RefusalPace(c.server.refusals_per_answer, endpoints.answer_rate, metrics.refusals_held)  # HTTP's and gRPC's
    http = server.http(c.server.max_request_bytes, HttpConnections(bound, metrics.evicted), c.server.idle_timeout_s,
                       pace)  # fmt: skip
    intake = _intake(http, c.server, setup.port, setup.local_sock, restrictions)
    if intake is None:
        await http.listen(c.server.host, setup.port, LISTEN_BACKLOG, reuse_port=True)
        if setup.local_sock is not None:
            await http.listen_on(setup.local_sock)
    grpc = None
    if setup.grpc_port is not None:
        grpc = await grpc_service.start(endpoints, c.server.host, setup.grpc_port, c.server.max_request_bytes,
                                       grpc_limits(bound, c.server.idle_timeout_s), pace, budget,
                                       restrictions)  # fmt: skip
    relay_this_thread()  # this loop passes every request on, real-time ones among them
    stopping, health = asyncio.Event(), asyncio.Event()
    changes = _Changes(setup.index, writer, front_end, regions, c.server.request_timeout_s)
    messages.start(front_end, endpoints, supervisor, changes, stopping, health)
    listener = asyncio.create_task(_listen(frames, supervisor, stopping, health))
    try:
        await health.wait()
        writer.write(channel.encode(Hello(setup.index, os.getpid())))
        # What start-up made lives as long as the process: frozen, the collector's full passes skip it
        # (measured: docs/data-plane.md).
        gc.freeze()
        endpoints.ready = True
        await stopping.wait()
        endpoints.ready = False  # new requests are refused from here on
        loop = asyncio.get_running_loop()
        deadline = loop.time() + c.server.drain_s
        if left := await _drained(endpoints, deadline):
            log.warning("%d request(s) still in flight after server.drain_s (%g s); closing their connections",
                        left, c.server.drain_s)  # fmt: skip
        # both close their listeners, send the answers in hand, then close every connection
        rest = max(0.0, deadline - loop.time())
        await asyncio.gather(http.shutdown(rest), *([intake.stop(rest)] if intake is not None else []),
                             *([grpc.stop(rest)] if grpc is not None else []))  # fmt: skip
    finally:
        listener.cancel()
        writer.close()
        front_end.close()
        regions.close()


def _intake(http: HttpServer, server, port: int, local: socket.socket | None,
            restrictions: Restrictions) -> NativeIntake | None:  # fmt: skip
    """The native intake of infer requests on `port` and `local` (the port's local twin, shared by
    the front ends; None: none), `http` taking what it hands on; None where `server.http_intake`
    is python or the intake cannot be built (`http` then listens on both itself)."""
    if server.http_intake != "native":
        return None
    family = socket.AF_INET6 if ":" in server.host else socket.AF_INET
    sock = socket.create_server((server.host, port), family=family, backlog=LISTEN_BACKLOG, reuse_port=True)
    try:
        socks = (sock,) if local is None else (sock, local)
        return NativeIntake(http, socks, restrictions.http_rule("/v2/models/m/infer"))
    except NativeBuildError as exc:
        sock.close()
        log.warning("the native intake is not available, every HTTP request is served on the event loop: %s", exc)
        return None


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
                case AddModel(spec=spec, arenas=arenas, colocated=colocated):
                    await self.front_end.warm_for(spec)
                    session = await asyncio.to_thread(LocalModels.build, spec) if colocated else None
                    self.front_end.add_model(spec, arenas.get(self.index), session)  # no arena: an ensemble
                case RetireModel(name=name):
                    await self.front_end.retire_model(name, self.timeout_s)
                case RtBounds():  # config answers show the real-time bounds (wire/rt_bounds.py)
                    models = self.front_end.models
                    models.update({key: message.change.applied(spec) for key, spec in models.items()})
                case change:
                    self.regions.apply(change)
        except ApiError as exc:
            error = exc
        except Exception as exc:  # a bug: the supervisor's caller gets it
            log.exception("change %r failed", message.change)
            error = ApiError(ErrorCode.INTERNAL, INTERNAL_ERROR)
        if not self.writer.is_closing():
            self.writer.write(channel.encode(Applied(message.id, error)))


async def _drained(endpoints: Endpoints, deadline: float) -> int:
    """Requests still in flight once all are answered (0) or the loop's clock reaches `deadline`."""
    loop = asyncio.get_running_loop()
    while (left := sum(a.in_flight for a in endpoints.admission.values())) and loop.time() < deadline:
        await asyncio.sleep(DRAIN_POLL_S)
    return left


class _Messages:
    """The supervisor's messages, as they arrive (`channel.Frames`); those that come before the
    front end is set up wait for it."""

    def __init__(self):
        self._early: list = []
        self._handle = self._early.extend

    def handle(self, messages: list) -> None:
        self._handle(messages)

    def start(self, front_end: FrontEnd, endpoints: Endpoints, supervisor: SupervisorLink, changes: _Changes,
              stopping: asyncio.Event, health: asyncio.Event) -> None:  # fmt: skip
        def handle(messages: list) -> None:
            for message in messages:  # the dispatcher's answers of one loop round come as one frame
                match message:
                    case Done():
                        front_end.on_done(message)
                    case Response():
                        front_end.on_response(message)
                    case Health(ready_models=models):
                        endpoints.ready_models = models
                        health.set()
                    case Reply():
                        supervisor.answered(message)
                    case Apply():
                        changes.start(message)
                    case Stop():
                        stopping.set()

        self._handle = handle
        handle(self._early)
        self._early = []


async def _listen(frames: channel.Frames, supervisor: SupervisorLink, stopping: asyncio.Event,
                  health: asyncio.Event) -> None:
    """Until the supervisor closes the channel."""
    await frames.closed
    supervisor.gone()
    health.set()  # none will come
    stopping.set()  # the supervisor is gone
