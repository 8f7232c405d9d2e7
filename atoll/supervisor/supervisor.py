"""The supervisor of one server: repository, vGPU workers, dispatcher, front-end processes, metrics.

`Supervisor.start()` checks every setting first (`checks.py`), starts the vGPU workers and the
dispatcher on this process's event loop, loads the models served at start (`add_model`: built and
warmed on every worker in every shape the batcher can ask for, a slot arena in each front end),
starts the front ends on the reserved ports, and returns once every front end listens. `stop()`
takes it down in reverse, restarting nothing once it began: front ends answer what they hold (up
to `server.drain_s`), then the dispatcher, workers and shared memory go. Children that die while
serving are started again (the pool's workers, `front_ends.py`'s front ends). Which process runs
what: docs/data-plane.md; signals and readiness: `lifecycle.py`. Its parts (pool, dispatcher,
batching, channels) are built through one factory, `parts.Parts`, which a test replaces.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path

from gpu_runtime.priority import BE_NICE_ENV, RT_FIFO_ENV, favour_real_time_threads
from gpu_runtime.thread_names import name_this_thread
from gpu_runtime.vgpu.shm import segment_prefix
from gpu_runtime.vgpu.slots import SlotArena

from atoll.config import Config
from atoll.front_end.process import LISTEN_BACKLOG
from atoll.front_end.rows import FrontEndSetup
from atoll.http import local_socket
from atoll.http.bodies import BodyLimits
from atoll.http.connections import HttpConnections, raise_open_file_limit
from atoll.http.edge import HttpServer
from atoll.http.messages import HttpRequest, HttpResponse, Routes
from atoll.kserve.errors import INTERNAL_ERROR, ApiError, ErrorCode
from atoll.kserve.shm_registry import RegionBook, Register, Unregister
from atoll.observe.metrics import Metrics, share_metrics
from atoll.pybackend.instances import PythonModels
from atoll.repository.demo import demo_repository
from atoll.repository.specs import ModelSpec
from atoll.supervisor import colocation
from atoll.supervisor.checks import Checked, StartError, check
from atoll.supervisor.dispatcher import Dispatcher
from atoll.supervisor.executor_choice import choose
from atoll.supervisor.instance_placement import place_instances, restricted_vgpus
from atoll.supervisor.front_ends import FrontEndSupervisor
from atoll.supervisor.latency_model import LatencyModel
from atoll.supervisor.model_batching import Batching, batch_spec, output_row_bytes, plan_for, row_bytes
from atoll.supervisor.model_control import ModelControl
from atoll.supervisor.parts import Parts
from atoll.supervisor.process_settings import HEAP_TUNING, METRICS_BODY_BYTES, METRICS_CONNECTIONS
from atoll.supervisor.residency import residency_settings
from atoll.supervisor.residency_view import ResidencyView
from atoll.supervisor.rt_admission import RealTime
from atoll.wire.channel import Applied, Control, Health, Hello
from atoll.wire.control import reply
from atoll.wire.model_control import AddModel, RetireModel
from atoll.wire.rt_bounds import RtBounds

log = logging.getLogger(__name__)
# Rows of a model one front end can hold at once (in preprocessing, batching or running) when
# server.max_pending_requests sets no bound: admission keeps far fewer in flight under overload.
SLOTS_PER_FRONT_END = 1024
# After its drain (`server.drain_s`) a front end closes its connections and exits; past this it is killed.
FRONT_END_EXIT_S = 10.0


def _loopback(host: str, port: int) -> str:
    """Where this server's HTTP port is reached from its own host (BLS requests)."""
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _shm_label(name: str) -> str:
    """`name` cut to 64 bytes, for a shared-memory name (at most 255 bytes in all)."""
    return name.encode()[:64].decode(errors="ignore")


class Supervisor:
    def __init__(self, config: Config, repository: Path | None = None, progress: bool = True,
                 parts: Parts | None = None):
        """`parts`: the factory its parts are built through (`parts.py`; tests pass stand-ins)."""
        self.config = config
        self.parts = parts or Parts()
        self.repository = repository
        self.progress = progress
        self.metrics: Metrics | None = None
        self.pool = None
        self.python: PythonModels | None = None  # Python-backend models' instances (atoll/pybackend)
        self.dispatcher: Dispatcher | None = None
        self.model_control: ModelControl | None = None
        self.models: dict[str, ModelSpec] = {}  # by served version (`ModelSpec.key`)
        self.rt = RealTime(())  # declared real-time models; made again at start, for the vGPUs found
        self.front_ends: list[FrontEndSupervisor] = []
        self._ready_models: frozenset[str] = frozenset()
        self._restarts: dict[str, int] = {}  # vGPU -> worker restarts counted so far
        self._python_restarts = 0  # Python models' instance restarts counted so far
        self._front_end_count = 0
        self._batching: Batching | None = None
        self._residency: ResidencyView | None = None  # what each vGPU's weight pool holds ([residency])
        self._channels = self.parts.channels()
        self._regions = RegionBook()
        self._tasks: set[asyncio.Task] = set()  # control calls being answered, the repository poll
        self._arenas: dict[str, list[SlotArena]] = {}  # model -> its arena in each front end
        self._colocated: set[str] = set()  # models whose best-effort requests the front ends run (colocation.py)
        self._loads = 0  # models loaded so far: part of their arenas' names
        self._arena_prefix = segment_prefix()
        self._gpu_uuids: tuple[str, ...] = ()
        self._checked: Checked | None = None  # what `check` found, the reserved ports among it
        self._vgpus: list = []  # the served vGPUs (`assemble`)
        self._executor: str | None = None  # the server's executor (`auto` resolved); None: the pool's
        self._metrics_dir: str | None = None
        self._http: list[HttpServer] = []
        self.http_url = ""
        self.grpc_address = ""
        self.metrics_url = ""
        self.local_http = ""  # the HTTP port's local twin (`local_socket`; "": none)
        self._local_sock: socket.socket | None = None

    async def start(self) -> None:
        c = self.config
        name_this_thread("atoll-super")  # its loop: dispatching, batching (the bench's CPU account)
        # every setting, before any process starts; off the loop, which feeds the watchdog (a forced
        # backend's probe may build the C simulation first)
        self._checked = checked = await asyncio.to_thread(check, c)
        vgpus = checked.vgpus
        os.environ[BE_NICE_ENV] = str(c.server.be_nice)  # for every process started from here
        os.environ[RT_FIFO_ENV] = str(c.server.rt_fifo)
        for key, value in HEAP_TUNING.items():
            os.environ.setdefault(key, value)
        favour_real_time_threads()  # the dispatcher shares this interpreter with the pool's threads
        raise_open_file_limit()  # children inherit it: pipes and shared memory for every worker and front end
        self._metrics_dir = tempfile.mkdtemp(prefix="atoll-metrics-")
        share_metrics(self._metrics_dir)
        self._gpu_uuids = tuple(v.uuid for v in vgpus if v.kind != "cpu" and v.uuid)
        self.metrics = Metrics(self._gpu_uuids)
        for kind in ("vgpu", "front_end", "python"):
            self.metrics.worker_restarts.labels(kind).inc(0)
        self.assemble(vgpus, checked.executor, _loopback(c.server.host, checked.ports["http"].getsockname()[1]))
        self.dispatcher.start()
        if self.repository is None:
            self.repository = checked.repository or await asyncio.to_thread(demo_repository, progress=self.progress)
        self.model_control = ModelControl(Path(self.repository), c.server.model_control_mode,
                                          c.server.repository_poll_secs, self.add_model, self.remove_model,
                                          self.rt.check)  # fmt: skip
        try:
            await self.model_control.start([m for m in c.server.load_model.split(",") if m], c.server.exit_on_error)
        except ApiError as exc:  # a name that cannot be a model folder
            raise StartError(f"server.load_model (--load-model): {exc.message}") from None
        self._workers_changed()  # the front ends start knowing every model just loaded is ready
        await self._start_front_ends()
        if c.server.model_control_mode == "poll":
            self._spawn(self.model_control.poll_forever())
        if "metrics" in checked.ports:
            self.metrics_url = await self._serve_metrics(c.server.host, checked.ports.pop("metrics"))
        gc.freeze()  # start-up's objects live as long as the process: the collector's passes skip them

    def assemble(self, vgpus: list, executor: str | None, url: str) -> None:
        """Build the parts for `vgpus` through the factory (`start` calls it once every setting is
        checked; a test calls it over stand-ins): batching, vGPU workers, Python models' instances
        (which reach this server's HTTP port at `url`), dispatcher, real-time admission."""
        c = self.config
        self._vgpus = vgpus  # what instance groups are placed on
        latency = LatencyModel()
        kinds = {v.id: v.profile_kind for v in vgpus}
        # a CPU vGPU runs a best-effort batch per core at once (gpu_runtime.vgpu.serial_engine)
        slots = {v.id: v.threads or 1 for v in vgpus if v.kind == "cpu"}
        residency = residency_settings(c.residency, executor)
        self._residency = ResidencyView(residency, kinds) if residency else None
        self._batching = self.parts.batching(c, kinds, latency, slots, self._residency and self._residency.switch_time)
        loop = asyncio.get_running_loop()
        self._executor = executor

        def changed() -> None:  # from the pool's threads
            loop.call_soon_threadsafe(self._workers_changed)

        self.python = self.parts.python(url, changed)
        self.pool = self.parts.pool(c, vgpus, executor, residency, changed)
        for vgpu in kinds:
            self.metrics.program_builds.labels(vgpu).inc(0)  # exported from the start, at 0
        self.dispatcher = self.parts.dispatcher(self.pool, self._batching.batcher, self.metrics, latency, kinds,
                                                self.python, self._residency)  # fmt: skip
        self.rt = RealTime(kinds.values(), self.metrics)  # declared real-time models: admission, enforcement
        self.dispatcher.rt = self.rt
        self._front_end_count = self.parts.front_end_count(c)

    # -- models (see model_control.py) --------------------------------------------------------------

    async def add_model(self, spec: ModelSpec) -> None:
        """Build `spec` on every vGPU worker, give every front end slots for it, and batch it. A load
        that fails takes back what it did, so the models served before are served as they were."""
        if spec.key in self.models:  # model control drops a served version before loading it again
            raise ValueError(f"model {spec.name!r} version {spec.version} is already served")
        if spec.ensemble is not None:  # nothing to build: its steps run on their models (front_end/ensembles.py)
            self.models[spec.key] = spec
            try:
                await self._channels.apply(AddModel(spec, {}))
            except Exception:
                del self.models[spec.key]
                await self._channels.apply(RetireModel(spec.key))
                raise
            self._workers_changed()
            return
        instances = place_instances(spec, self._vgpus)
        vgpus = restricted_vgpus(spec.name, instances, list(self.pool.workers), self.config.batching.batcher)
        settings, largest = self._batching.settings(spec, vgpus)
        plan = plan_for(spec, settings.batching, largest)
        undo = []  # what to take back, latest first, should a later step fail
        self.rt.admit(spec)  # refused (RtRefused) before anything is loaded
        undo.append(lambda: self._forget_real_time(spec.name))
        try:
            if spec.python is not None:  # its own processes (atoll/pybackend), not the vGPU workers
                undo.append(lambda: asyncio.to_thread(self.python.unload, spec.key))
                await asyncio.to_thread(self.python.load, spec)
                out_row_bytes = self.python.out_row_bytes(spec)
            else:
                out_row_bytes = await self._load_on_vgpus(spec, plan, undo, instances)
            in_bytes = row_bytes(spec, plan)
            # at least the front end's admission share (`pending_share`): an admitted request never waits for slots
            share = self.config.server.pending_share(self._front_end_count)
            count = (share or SLOTS_PER_FRONT_END) + 2 * max(spec.max_batch_size, 1)
            # A new name for every load: a worker (or front end) that still maps the arena of an
            # earlier load of this model must never take it for this one.
            self._loads += 1
            arenas = []
            undo.append(lambda: [arena.close() for arena in arenas])
            for index in range(self._front_end_count):
                name = f"{self._arena_prefix}-{self._loads}-fe{index}-{_shm_label(spec.name)}"
                arenas.append(SlotArena.create(name, count, in_bytes, out_row_bytes))
            self._arenas[spec.key] = arenas
            undo.append(lambda: self._arenas.pop(spec.key))
            self.dispatcher.add_model(plan, settings)
            undo.append(lambda: self.dispatcher.remove_model(spec.key))
            self.models[spec.key] = spec
            undo.append(lambda: self.models.pop(spec.key))
            undo.append(lambda: self._channels.apply(RetireModel(spec.key)))  # the front ends that added it
            await self._channels.apply(AddModel(spec, {index: arena.name for index, arena in enumerate(arenas)},
                                                spec.key in self._colocated))  # fmt: skip
            await self._publish_rt_bounds()
        except Exception:
            for step in reversed(undo):
                try:
                    if asyncio.iscoroutine(result := step()):
                        await result
                except Exception:  # the load's own error is the one to report
                    log.warning("taking back the failed load of %s", spec.name, exc_info=True)
            raise
        if spec.python is not None:  # ready now, and the ensembles it completes (the vGPU pool says so itself)
            self._workers_changed()

    async def _load_on_vgpus(self, spec: ModelSpec, plan, undo: list, instances: dict[str, int] | None) -> int:
        """Build `spec` on every vGPU worker (`instances`: on those, with that many executor
        instances each); the bytes a row's outputs take at most."""
        datatypes = [t.datatype for t in spec.inputs + spec.outputs]
        datatypes += spec.sequence.datatypes if spec.sequence else ()  # the controls and states it is given
        variable = [t.name for t in spec.inputs if -1 in t.model_dims] if not spec.padded else []
        executor = await asyncio.to_thread(choose, self._executor, spec.path, datatypes, variable,
                                           max((instances or {}).values(), default=1))  # fmt: skip
        if executor.reason:
            log.info("%s runs on %s: %s", spec.name, executor.executor, executor.reason)
        kinds = [v.kind for v in self._vgpus if v.id in (instances or self.pool.workers)]
        if not colocation.reason_not(spec, executor.executor or self._executor, kinds, self.config.server.colocate):
            log.info("%s: the front ends run its best-effort requests themselves (CPU vGPUs)", spec.key)
            self._colocated.add(spec.key)
            undo.append(lambda: self._colocated.discard(spec.key))
        log.info("loading %s on %s: batches up to %d%s", spec.key,
                 f"{len(self.pool.workers)} vGPU(s)" if instances is None else f"vGPU instances {instances}",
                 plan.max_batch, f", lengths {plan.padded_frames} frames" if plan.padded_frames else "")  # fmt: skip
        undo.append(lambda: asyncio.to_thread(self.pool.unload_model, spec.key))  # workers that did load
        described = await asyncio.to_thread(self.pool.load_model, spec.key, spec.path, executor.executor,
                                            plan.max_batch, None, batch_spec(spec), plan.padded_frames,
                                            instances)  # fmt: skip
        log.info("%s: device memory %s", spec.key, {v: d.get("device_memory") for v, d in described.items()})
        if instances is not None:  # as each worker built them
            log.info("%s: executor instances %s", spec.key, {v: d.get("instances") for v, d in described.items()})
        if self._residency is not None:
            self._residency.add(spec.key, described)
        return output_row_bytes(spec, max(d["out_row_bytes"] for d in described.values()))

    def _forget_real_time(self, name: str) -> None:
        """Real-time envelopes are declared per model: forgotten with its last served version."""
        if not any(s.name == name for s in self.models.values()):
            self.rt.forget(name)

    async def _publish_rt_bounds(self) -> None:
        """Every served spec, here (for front ends started later) and in every front end, with its
        real-time bound in its parameters, where an admission or a removal moved any."""
        change = RtBounds(self.rt.bounds_ms())
        if any(change.applied(spec) is not spec for spec in self.models.values()):
            self.models.update({key: change.applied(spec) for key, spec in self.models.items()})
            await self._channels.apply(change)

    async def remove_model(self, name: str) -> None:
        """Retire the served version `name` (`ModelSpec.key`) in every front end (they answer its
        requests first), then everywhere else."""
        await self._channels.apply(RetireModel(name))
        spec = self.models.pop(name)
        self._colocated.discard(name)
        self._forget_real_time(spec.name)
        await self._publish_rt_bounds()
        if spec.ensemble is not None:
            self._workers_changed()
            return
        self.dispatcher.remove_model(name)
        python = self.python is not None and name in self.python.models
        await asyncio.to_thread(self.python.unload if python else self.pool.unload_model, name)
        for arena in self._arenas.pop(name):
            arena.close()

    # -- vGPU workers -------------------------------------------------------------------------------

    def _workers_changed(self) -> None:
        """A vGPU worker died, started, or loaded or unloaded a model: count restarts, tell the
        front ends which models can run now."""
        for vgpu, state in self.pool.workers.items():
            before = self._restarts.get(vgpu, 0)
            if state.restarts > before:
                self.metrics.worker_restarts.labels("vgpu").inc(state.restarts - before)
            self._restarts[vgpu] = state.restarts
        if self.python.restarts > self._python_restarts:  # Python models' instances (atoll/pybackend)
            self.metrics.worker_restarts.labels("python").inc(self.python.restarts - self._python_restarts)
            self._python_restarts = self.python.restarts
        ready = self.pool.ready_models() | self.python.ready_models()
        ready = frozenset(ready | {key for key, spec in self.models.items()
                                   if spec.ensemble is not None and spec.ensemble.ready(ready)})  # fmt: skip
        if ready != self._ready_models:
            self._ready_models = ready
            for front_end in self.front_ends:
                front_end.send(Health(ready))

    # -- front ends ---------------------------------------------------------------------------------

    async def _start_front_ends(self) -> None:
        c = self.config
        count = self._front_end_count
        ports = self._checked.ports
        port = ports["http"].getsockname()[1]
        grpc_port = ports["grpc"].getsockname()[1] if "grpc" in ports else None
        if c.server.http_local_socket:  # held here for the front ends' lives: one that restarts accepts on it again
            local = local_socket.listen(f"atoll-http-{os.getpid()}-{port}", LISTEN_BACKLOG)
            if local is not None:
                self._local_sock, self.local_http = local

        def setup_of(index: int, held: frozenset) -> FrontEndSetup:
            arenas = {name: arenas[index].name for name, arenas in self._arenas.items()}
            return FrontEndSetup(index, count, c, dict(self.models), arenas, port, grpc_port, self._gpu_uuids,
                                 held, self._regions.all(), frozenset(self._colocated), self._local_sock)  # fmt: skip

        for index in range(count):
            self.front_ends.append(FrontEndSupervisor(
                index, functools.partial(setup_of, index), self.dispatcher, self.metrics,
                lambda: self._ready_models, self._front_end_message, self._channels.gone))  # fmt: skip
        await asyncio.gather(*(front_end.start() for front_end in self.front_ends))
        host = f"[{c.server.host}]" if ":" in c.server.host else c.server.host
        self.http_url = f"http://{host}:{port}"
        self.grpc_address = f"{host}:{grpc_port}" if grpc_port is not None else ""
        log.info("%d front end(s) on port %d%s", count, port, f", gRPC on {grpc_port}" if grpc_port else "")
        if self.local_http:
            log.info("HTTP also on the local socket %s", self.local_http)

    def _front_end_message(self, index: int, writer, message) -> None:
        match message:
            case Control():
                self._spawn(self._control(writer, message))
            case Applied():
                self._channels.applied(index, message)
            case Hello():
                self._channels.writers[index] = writer

    async def _control(self, writer, message: Control) -> None:
        """Answer a front end's call (see control.py)."""
        try:
            if isinstance(message.action, (Register, Unregister)):
                result = await self._regions.handle(message.action, self._channels.apply)
            else:
                result = await self.model_control.handle(message.action)
        except ApiError as exc:
            reply(writer, message, error=exc)
        except Exception as exc:  # a bug: the caller gets it, the server goes on
            log.exception("control call %r failed", message.action)
            reply(writer, message, error=ApiError(ErrorCode.INTERNAL, INTERNAL_ERROR))
        else:
            reply(writer, message, result)

    def _spawn(self, coroutine) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _metrics_text(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse(body=self.metrics.render())

    async def _serve_metrics(self, host: str, reserved: socket.socket) -> str:
        """Serve the metrics on the `reserved` port (closed once listened on), with its connections
        bounded as a front end's are."""
        routes = Routes()
        routes.add("GET", "/metrics", self._metrics_text)
        server = HttpServer(routes, BodyLimits(METRICS_BODY_BYTES, self.config.server.body_timeout_s),
                            HttpConnections(METRICS_CONNECTIONS, name="metrics"), self.config.server.idle_timeout_s)
        with reserved:
            port = reserved.getsockname()[1]
            await server.listen(host, port, reuse_port=True)
        self._http.append(server)
        return f"http://{host}:{port}"

    async def stop(self) -> None:
        """Take down what `start` started, however far it got: nothing is restarted from here on."""
        for task in self._tasks:
            task.cancel()
        if self.pool:
            self.pool.stop_restarts()
        for front_end in self.front_ends:  # front ends first: they answer what they hold
            front_end.stop()
        if self.front_ends:
            exit_s = self.config.server.drain_s + FRONT_END_EXIT_S
            await asyncio.gather(*(front_end.join(exit_s) for front_end in self.front_ends))
            log.info("front ends stopped")
        for server in self._http:
            await server.shutdown(0)
        if self._local_sock is not None:
            self._local_sock.close()
        if self.dispatcher:
            await self.dispatcher.stop()
        if self.python:
            await asyncio.to_thread(self.python.close)
        if self.pool:
            await asyncio.to_thread(self.pool.close)
            log.info("vGPU workers stopped")
        for arenas in self._arenas.values():
            for arena in arenas:
                arena.close()
        if self.model_control:
            self.model_control.close()
        if self._checked is not None:
            self._checked.close()
        if self._metrics_dir:
            shutil.rmtree(self._metrics_dir, ignore_errors=True)
