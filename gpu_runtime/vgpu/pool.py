"""WorkerPool: one worker process per vGPU, fed batches through shared memory.

`submit` (arrays) and `submit_rows` (rows already in slot arenas) return concurrent Futures. One
monitor thread waits on every worker's pipe and process sentinel: replies resolve futures, a
sentinel firing means a death. A dead worker is restarted (after a `backoff.Backoff` delay when it
keeps dying), its models reloaded and its in-flight requests re-sent, each at most `crash_retries`
times, so every request ends in a result or an exception. A worker with batches in flight that has
said nothing for `stall_s` (or four times its slowest batch) is stalled: not ready until it answers,
and never killed, since it may only be slow. `on_change` hears of every death, start, load and stall.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import multiprocessing
import os
import queue
import selectors
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from gpu_runtime.executors import DEFAULT_EXECUTOR
from gpu_runtime.priority import Priority, relay_this_thread
from gpu_runtime.thread_names import name_this_thread
from gpu_runtime.vgpu import shm
from gpu_runtime.vgpu.backoff import Backoff
from gpu_runtime.vgpu.discovery import VGpuInfo
from gpu_runtime.vgpu.messages import (BatchSpec, Failed, Fatal, Forget, Load, Loaded, Ran, RanRows,
                                       Ready, Row, RowSequence, Run, RunRows, Stop, Unload, Unloaded)
from gpu_runtime.vgpu.worker import worker_main

log = logging.getLogger(__name__)


class WorkerCrashed(RuntimeError):
    """The worker died while the request was in flight, more often than the retry budget allows
    (or it could not start at all)."""


class WorkerError(RuntimeError):
    """The worker raised while serving the request (bad input, unknown model, executor failure)."""


class PoolClosed(RuntimeError):
    pass


@dataclass
class _Request:
    req: int
    future: Future
    message: Load | Unload | Run | RunRows
    segments: tuple = ()  # (input, output) SharedMemory from the worker's cache, for Run
    out_key: tuple[str, int] | None = None  # (model, input bytes): learns the output size
    crashes: int = 0


@dataclass
class WorkerState:
    """What the pool knows about one worker; read it freely, the pool updates it."""

    info: VGpuInfo
    pid: int | None = None
    ready: bool = False  # this incarnation is up (False from its death until its successor says Ready)
    restarts: int = 0
    alive: bool = True  # False once the worker could not start (it would fail the same way again)
    error: str | None = None  # why it is not alive
    last_batch_seconds: float | None = None  # compute time of the last batch, inside the worker
    loaded: dict[str, dict] = field(default_factory=dict)  # model -> description, this incarnation
    inflight_runs: int = 0
    program_builds: int = 0  # shapes built after their model's load (see worker.py), all lifetimes
    stalled: bool = False  # batches in flight and no word from it for too long (see the module docstring)

    @property
    def busy(self) -> bool:
        return self.inflight_runs > 0

    @property
    def queue_length(self) -> int:
        """Batches waiting behind the one being computed."""
        return max(0, self.inflight_runs - 1)


STALL_FLOOR_S = 5.0
STALL_FACTOR = 4  # times a worker's slowest batch: the least silence that makes it stalled


class _Worker:
    def __init__(self, info: VGpuInfo, ctx, prefix: str, engine, backoff: Backoff,
                 clock: Callable[[], float]):
        self.state = WorkerState(info)
        self.clock = clock
        self.ctx = ctx
        self.engine = engine
        self.backoff = backoff
        self.segments = shm.SegmentCache(f"{prefix}-{info.id}")
        self.inflight: dict[int, _Request] = {}
        self.models: dict[str, Load] = {}  # model -> its load message, replayed after a restart
        self.builds_before = 0  # program builds of the incarnations before this one
        self.conn = None  # None from a death until the restart
        self.restart_at: float | None = None  # when a dead worker is started again
        self.heard = 0.0  # the last reply, or the first batch sent after none was in flight
        self.slowest_batch = 0.0  # seconds, this incarnation
        self.start()

    def start(self) -> None:
        """Start a worker process, with its own pipe and sender thread (one set per incarnation,
        so nothing queued for a dead worker reaches its successor)."""
        self.conn, child = self.ctx.Pipe()
        name = f"atoll-vgpu-{self.state.info.id}"
        self.process = self.ctx.Process(
            target=worker_main, args=(child, self.state.info, self.engine), name=name, daemon=True
        )
        self.process.start()
        child.close()
        self.backoff.started(self.clock())
        self.state.pid = self.process.pid
        self.state.ready = False
        self.state.loaded = {}
        self.state.stalled = False
        self.slowest_batch = 0.0
        self.restart_at = None
        self.outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.sender = threading.Thread(
            target=_send_loop, args=(self.conn, self.outbox), name=f"send-{name}", daemon=True
        )
        self.sender.start()

    def stall_deadline(self, floor_s: float) -> float | None:
        """When this worker counts as stalled if it stays silent; None while nothing is in flight."""
        if self.conn is None or not self.state.inflight_runs:
            return None
        return self.heard + max(floor_s, STALL_FACTOR * self.slowest_batch)

    def send(self, message) -> None:
        """Queue a message; never blocks, so a worker that is slow to read cannot stall the pool."""
        self.outbox.put(message)

    def retire(self) -> None:
        """Stop this incarnation's sender thread after anything already queued; the pool no longer
        reads its pipe. The thread closes the pipe itself: closed here, a send it had begun could
        write into the successor's pipe, which may reuse the descriptor number (a re-run then
        reached the new worker before its models)."""
        self.outbox.put(None)
        self.conn = None


def _send_loop(conn, outbox: queue.SimpleQueue) -> None:
    """Send what is queued until `retire`; close the pipe only then, since until then the pool's
    monitor may still read it (a send fails once the worker dies, before the monitor knows)."""
    name_this_thread()
    relay_this_thread()
    failed = False
    while (message := outbox.get()) is not None:
        if not failed:
            try:
                conn.send(message)
            except OSError:  # the worker died; the pool restarts it and re-sends what is in flight
                failed = True
    conn.close()


class WorkerPool:
    def __init__(
        self,
        infos: list[VGpuInfo],
        executor: str = DEFAULT_EXECUTOR,
        crash_retries: int = 1,
        engine=None,
        backoff: Backoff | None = None,
        on_change: Callable[[], None] | None = None,
        stall_s: float = STALL_FLOOR_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        """`engine` is what runs batches inside each worker: a picklable callable taking the
        worker's VGpuInfo (see gpu_runtime.vgpu.worker); None for `serial_engine.SerialEngine`.
        `backoff` is the restart policy each worker starts from (default `Backoff()`); `stall_s`
        the silence that makes a busy worker stalled (see the module docstring); `clock` the
        time that restarts and stalls are reckoned in (the monitor's waits follow it)."""
        if not infos:
            raise ValueError("WorkerPool needs at least one vGPU")
        self.executor = executor
        self.crash_retries = crash_retries
        self.on_change = on_change or (lambda: None)
        self.stall_s = stall_s
        self.clock = clock
        backoff = backoff or Backoff()
        self._prefix = shm.segment_prefix()
        self._ids = itertools.count()
        self._lock = threading.RLock()
        self._closed = False
        self._stopping = False  # a stop is under way: a worker that dies now is not started again
        ctx = multiprocessing.get_context("spawn")
        self._wake_r, self._wake_w = ctx.Pipe(duplex=False)
        self._workers = {info.id: _Worker(info, ctx, self._prefix, engine, dataclasses.replace(backoff),
                                          clock) for info in infos}  # fmt: skip
        self._out_bytes: dict[tuple[str, int], int] = {}  # (model, input bytes) -> output bytes
        self._monitor = threading.Thread(
            target=self._monitor_loop, name="hop-monitor", daemon=True
        )
        self._monitor.start()

    # ---- public API -------------------------------------------------------------------------

    @property
    def workers(self) -> dict[str, WorkerState]:
        return {vid: w.state for vid, w in self._workers.items()}

    def ready_models(self) -> set[str]:
        """The models some worker can run now: it is up and has loaded them in this incarnation."""
        with self._lock:
            return {model for w in self._workers.values() if w.state.ready and not w.state.stalled
                    for model in w.state.loaded}  # fmt: skip

    def load_model(
        self,
        name: str,
        onnx_path: str | os.PathLike,
        executor: str | None = None,
        max_batch: int | None = None,
        timeout: float | None = 300.0,
        batch: BatchSpec | None = None,
        lengths: tuple[int, ...] = (),
    ) -> dict[str, dict]:
        """Load a model on every worker; returns {vgpu_id: executor description}. Raises the first
        worker's error if any worker failed to load it. With `batch` (needed by `submit_rows`),
        every batch size up to `max_batch` times every padded length in `lengths` is built and run
        once before this returns, and the description says how many bytes one row's outputs take
        at most (`out_row_bytes`)."""
        futures = {}
        with self._lock:
            self._check_open()
            for vid, worker in self._workers.items():
                message = Load(next(self._ids), name, os.fspath(onnx_path), executor or self.executor,
                               max_batch, batch, tuple(lengths))
                worker.models[name] = message
                futures[vid] = self._dispatch(worker, _Request(message.req, Future(), message))
        return {vid: future.result(timeout) for vid, future in futures.items()}

    def unload_model(self, name: str, timeout: float | None = 300.0) -> None:
        """Unload a model from every worker (none of its batches may be in flight); it is no
        longer reloaded when a worker restarts."""
        futures = []
        with self._lock:
            self._check_open()
            for worker in self._workers.values():
                worker.models.pop(name, None)
                worker.state.loaded.pop(name, None)
                message = Unload(next(self._ids), name)
                futures.append(self._dispatch(worker, _Request(message.req, Future(), message)))
        for future in futures:
            future.result(timeout)

    def submit(self, vgpu_id: str, model: str, inputs: dict[str, np.ndarray],
               priority: str = Priority.BE) -> Future:
        """Run one batch of `model` on vGPU `vgpu_id`, as real-time ("rt") or best-effort ("be")
        work; the future yields its outputs by name."""
        priority = Priority.of(priority)
        worker = self._live_worker(vgpu_id)
        arrays = {name: np.asarray(array) for name, array in inputs.items()}
        _, in_bytes = shm.plan(arrays)
        in_seg = worker.segments.acquire(in_bytes)
        # Until a model's output size is known for this input size, guess the input size.
        out_seg = worker.segments.acquire(self._out_bytes.get((model, in_bytes), in_bytes))
        try:
            layout = shm.store(in_seg.buf, arrays)
        except Exception:  # e.g. object arrays: give the segments back before refusing
            worker.segments.release(in_seg)
            worker.segments.release(out_seg)
            raise
        message = Run(next(self._ids), model, priority, shm.segment_name(in_seg), layout,
                      shm.segment_name(out_seg), out_seg.size)
        return self._start(worker, _Request(message.req, Future(), message, (in_seg, out_seg),
                                            out_key=(model, in_bytes)))

    def submit_rows(self, vgpu_id: str, model: str, rows: tuple[Row, ...], length: int | None = None,
                    priority: str = Priority.BE, sequences: tuple[RowSequence, ...] = (),
                    released: tuple = ()) -> Future:
        """Run the rows (in slot arenas, see slots.py) as one batch of `model`, each row's variable
        dimension padded to `length`; every row's outputs are left in its slot's output region and
        the future yields their layouts, in row order. The model must be loaded with a BatchSpec.
        A stateful model's rows each name their sequence (`sequences`); `released`: sequences whose
        state the worker drops before it runs them."""
        priority = Priority.of(priority)
        worker = self._live_worker(vgpu_id)
        if not rows:
            raise ValueError("a batch needs at least one row")
        message = RunRows(next(self._ids), model, priority, tuple(rows), length, tuple(sequences), tuple(released))
        return self._start(worker, _Request(message.req, Future(), message))

    def _live_worker(self, vgpu_id: str) -> _Worker:
        worker = self._workers.get(vgpu_id)
        if worker is None:
            raise KeyError(f"unknown vGPU {vgpu_id!r}; have {', '.join(self._workers)}")
        if self._closed:
            raise PoolClosed("pool closed")
        if not worker.state.alive:
            raise PoolClosed(f"vGPU {vgpu_id} is dead: {worker.state.error}")
        return worker

    def _start(self, worker: _Worker, request: _Request) -> Future:
        request.future.set_running_or_notify_cancel()  # a batch in flight cannot be cancelled
        with self._lock:
            if self._closed:
                self._finish(worker, request, exception=PoolClosed("pool closed"))
                return request.future
            return self._dispatch(worker, request)

    def stop_restarts(self) -> None:
        """From now on a worker that dies stays dead and fails what it held: the server is stopping,
        and a successor would only be stopped again."""
        with self._lock:
            self._stopping = True

    def close(self, timeout: float = 10.0) -> None:
        """Stop every worker, fail what is still in flight, and unlink every segment."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake_w.send(None)
        self._monitor.join(timeout)
        for worker in self._workers.values():
            worker.send(Stop())
            worker.retire()
        for worker in self._workers.values():
            worker.process.join(timeout)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.sender.join(timeout)  # its worker is gone: its last send fails at once
            self._fail_all(worker, PoolClosed("pool closed before the request finished"))
            worker.segments.close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- internals ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise PoolClosed("pool closed")

    def _dispatch(self, worker: _Worker, request: _Request) -> Future:
        if not worker.state.alive:
            error = WorkerError(f"{worker.state.info.id} is dead: {worker.state.error}")
            self._finish(worker, request, exception=error)
            return request.future
        worker.inflight[request.req] = request
        if not isinstance(request.message, (Load, Unload)):
            if not worker.state.inflight_runs:  # its silence counts from now
                worker.heard = self.clock()
            worker.state.inflight_runs += 1
        worker.send(request.message)
        return request.future

    def _monitor_loop(self) -> None:
        # One selector for the pool's life (building one per wait, as connection.wait does, cost
        # more than the replies it waited for), re-synced only when a worker's handles change.
        name_this_thread()
        relay_this_thread()
        selector = selectors.DefaultSelector()
        selector.register(self._wake_r.fileno(), selectors.EVENT_READ)
        watched: dict[int, tuple] = {}
        try:
            while True:
                with self._lock:
                    if self._closed:
                        return
                    now = self.clock()
                    for worker in self._workers.values():
                        if worker.restart_at is not None and worker.restart_at <= now:
                            self._start_again(worker)
                    wanted = {}
                    for worker in self._workers.values():
                        if worker.conn is not None:
                            wanted[worker.conn.fileno()] = (worker, worker.conn)
                            wanted[worker.process.sentinel] = (worker, worker.process)
                    restarts = [w.restart_at for w in self._workers.values() if w.restart_at is not None]
                    stalled, stalls = self._note_stalls(now)
                if stalled:
                    self.on_change()
                for fd in [fd for fd, data in watched.items() if wanted.get(fd) != data]:
                    selector.unregister(fd)
                    del watched[fd]
                for fd, data in wanted.items():
                    if fd not in watched:
                        selector.register(fd, selectors.EVENT_READ, data)
                        watched[fd] = data
                # at least once a second: a batch sent to an idle worker starts a stall deadline unannounced
                timeout = max(0.0, min([*restarts, *stalls, now + 1.0]) - self.clock())
                for key, _ in selector.select(timeout):  # handles of a worker that died meanwhile are stale
                    if key.data is None:
                        self._wake_r.recv()
                        continue
                    worker, handle = key.data
                    if handle is worker.conn:
                        self._receive(worker)
                    elif handle is worker.process and worker.conn is not None and not self._closed:
                        self._drain(worker)  # replies sent just before dying still count
                        self._on_death(worker)
                        self.on_change()
        finally:
            selector.close()

    def _receive(self, worker: _Worker) -> None:
        """One reply: the selector said there is one (Connection.poll builds a selector per call)."""
        try:
            self._on_reply(worker, worker.conn.recv())
        except (EOFError, OSError):  # pipe closed: the sentinel reports the death
            pass

    def _drain(self, worker: _Worker) -> None:
        try:
            while worker.conn.poll():
                self._on_reply(worker, worker.conn.recv())
        except (EOFError, OSError):
            pass

    def _note_stalls(self, now: float) -> tuple[bool, list[float]]:
        """Mark workers whose stall deadline has passed (the lock held): whether any newly is, and
        the deadlines still to come. A stalled worker has none left to wake for (its past one would
        keep the monitor spinning)."""
        newly, upcoming = False, []
        for worker in self._workers.values():
            deadline = worker.stall_deadline(self.stall_s)
            if deadline is None or worker.state.stalled:
                continue
            if deadline > now:
                upcoming.append(deadline)
                continue
            worker.state.stalled = newly = True
            log.warning("vGPU %s: no word for %.1f s with %d batch(es) in flight; its models count as not ready "
                        "until it answers", worker.state.info.id, now - worker.heard,
                        worker.state.inflight_runs)  # fmt: skip
        return newly, upcoming

    def _on_reply(self, worker: _Worker, reply) -> None:
        worker.heard = self.clock()
        if worker.state.stalled:
            with self._lock:
                worker.state.stalled = False
            log.info("vGPU %s answers again", worker.state.info.id)
            self.on_change()
        match reply:
            case Ready():
                worker.state.ready = True
                return
            case Fatal(reason=reason):
                with self._lock:
                    worker.state.alive = False
                    worker.state.error = reason
                self._fail_all(worker, WorkerError(f"{worker.state.info.id}: cannot start: {reason}"))
                self.on_change()
                return
        with self._lock:
            request = worker.inflight.pop(reply.req, None)
            if request is None:
                return
            if not isinstance(request.message, (Load, Unload)):
                worker.state.inflight_runs -= 1
        match reply:
            case Failed(kind=kind, message=text):
                if isinstance(request.message, Load):
                    worker.models.pop(request.message.model, None)  # don't replay a failed load
                # the message alone: an exception's type is no answer to give a client
                self._finish(worker, request, exception=WorkerError(f"{worker.state.info.id}: {text or kind}"))
            case Loaded(description=description):
                worker.state.loaded[request.message.model] = description
                self._finish(worker, request, result=description)
                self.on_change()
            case Unloaded():
                self._finish(worker, request)
                self.on_change()
            case Ran():
                self._ran(worker, reply)
                self._finish(worker, request, result=self._outputs(request, reply))
            case RanRows(layouts=layouts):
                self._ran(worker, reply)
                self._finish(worker, request, result=layouts)

    def _ran(self, worker: _Worker, reply: Ran | RanRows) -> None:
        worker.state.last_batch_seconds = reply.seconds
        worker.slowest_batch = max(worker.slowest_batch, reply.seconds)
        worker.state.program_builds = worker.builds_before + reply.program_builds

    def _outputs(self, request: _Request, reply: Ran) -> dict:
        out_name = request.message.out_segment
        self._out_bytes[request.out_key] = reply.out_bytes
        if reply.overflowed:
            try:
                return shm.read(out_name + "x", reply.layout)
            finally:
                shm.unlink(out_name + "x")
        views = shm.views(request.segments[1].buf, reply.layout)
        return {name: view.copy() for name, view in views.items()}

    def _finish(
        self, worker: _Worker, request: _Request, result=None, exception: BaseException | None = None
    ) -> None:
        evicted = [name for seg in request.segments for name in worker.segments.release(seg)]
        request.segments = ()
        if evicted and not self._closed:
            worker.send(Forget(tuple(evicted)))
        if request.future.done():
            return
        if exception is not None:
            request.future.set_exception(exception)
        else:
            request.future.set_result(result)

    def _on_death(self, worker: _Worker) -> None:
        """Reap a dead worker and schedule its successor, at once or after its backoff. What it had
        in flight waits for the successor, except requests it has now died running more than
        `crash_retries` times, which fail here (and everything, if it cannot start at all)."""
        with self._lock:
            worker.process.join()
            code = worker.process.exitcode
            served = worker.state.ready
            worker.retire()
            worker.state.ready = False
            worker.state.loaded = {}
            worker.builds_before = worker.state.program_builds
            vgpu = worker.state.info.id
            if not worker.state.alive:  # it said why it cannot start (Fatal) and exited
                return
            if code > 0 and not served:
                # It exited by itself before serving (e.g. spawn could not import the parent's
                # __main__): a restart would fail the same way.
                worker.state.alive = False
                worker.state.error = f"exited with code {code} during startup (see its stderr)"
                log.error("vGPU %s: worker %s; vGPU disabled", vgpu, worker.state.error)
                self._fail_all(worker, WorkerCrashed(f"{vgpu}: worker {worker.state.error}; vGPU disabled"))
                return
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            if self._stopping:
                worker.state.alive = False
                log.info("vGPU %s: worker (pid %d) died (%s) while the server stops; not restarted", vgpu,
                         worker.state.pid, how)  # fmt: skip
                self._fail_all(worker, WorkerCrashed(f"{vgpu}: worker died ({how}) while the server stops"))
                return
            for req, request in list(worker.inflight.items()):
                if isinstance(request.message, Run):
                    shm.unlink(request.message.out_segment + "x")  # an overflow output of the dead worker
                request.crashes += 1
                if request.crashes > self.crash_retries:
                    del worker.inflight[req]
                    if isinstance(request.message, Load):
                        worker.models.pop(request.message.model, None)
                    self._finish(worker, request, exception=WorkerCrashed(
                        f"{vgpu}: worker died ({how}) while running this request, {request.crashes} time(s)"))
            delay = worker.backoff.delay(self.clock())
            log.warning("vGPU %s: worker (pid %d) died, %s; restarting it%s", vgpu, worker.state.pid, how,
                        f" in {delay:.1f} s (it died again soon after its last start)" if delay else "")
            worker.restart_at = self.clock() + delay

    def _start_again(self, worker: _Worker) -> None:
        """Start the successor of a dead worker (under the lock): reload its models, then re-send
        what was in flight, in the order it was first sent."""
        pending = [worker.inflight[r] for r in sorted(worker.inflight)]
        worker.inflight.clear()
        worker.state.inflight_runs = 0
        worker.state.restarts += 1
        worker.start()
        pending_loads = {r.message.model for r in pending if isinstance(r.message, Load)}
        for name, message in worker.models.items():
            if name not in pending_loads:
                replay = dataclasses.replace(message, req=next(self._ids))
                self._dispatch(worker, _Request(replay.req, Future(), replay))
        for request in pending:
            self._dispatch(worker, request)
        self.on_change()

    def _fail_all(self, worker: _Worker, error: BaseException) -> None:
        with self._lock:
            pending = list(worker.inflight.values())
            worker.inflight.clear()
            worker.state.inflight_runs = 0
        for request in pending:
            self._finish(worker, request, exception=error)
