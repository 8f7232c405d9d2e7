"""WorkerPool: one worker process per vGPU, fed batches of rows in shared-memory slot arenas.

`submit_rows` returns a concurrent Future. One
monitor thread waits on every worker's pipe and process sentinel: replies resolve futures, a
sentinel firing means a death. A dead worker is restarted, its models reloaded and its in-flight
requests re-sent, each at most `crash_retries` times (`restarts.py`), so every request ends in a
result or an exception. A busy worker silent for too long is stalled, not killed (`stalls.py`).
`on_change` hears of every death, start, load and stall. The pool's side of each worker process
(pipe, sender thread, state) is a `worker_handle.WorkerHandle`.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import multiprocessing
import os
import selectors
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from gpu_runtime.executors import DEFAULT_EXECUTOR
from gpu_runtime.priority import Priority, relay_this_thread
from gpu_runtime.thread_names import name_this_thread
from gpu_runtime.vgpu.backoff import Backoff
from gpu_runtime.vgpu.discovery import VGpuInfo
from gpu_runtime.vgpu.errors import PoolClosed, WorkerCrashed, WorkerError
from gpu_runtime.vgpu.messages import (BatchSpec, Failed, Fatal, Load, Loaded, RanRows, Ready, Row, RowSequence,
                                       RunRows, Stop, Unload, Unloaded)
from gpu_runtime.vgpu.restarts import Restarts
from gpu_runtime.vgpu.stalls import STALL_FLOOR_S, note_stalls
from gpu_runtime.vgpu.worker_handle import Request, WorkerHandle, WorkerState

__all__ = ["PoolClosed", "WorkerCrashed", "WorkerError", "WorkerPool", "WorkerState"]  # where callers import them

log = logging.getLogger(__name__)


class WorkerPool(Restarts):
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
        self._ids = itertools.count()
        self._lock = threading.RLock()
        self._closed = False
        self._stopping = False  # a stop is under way: a worker that dies now is not started again
        ctx = multiprocessing.get_context("spawn")
        self._wake_r, self._wake_w = ctx.Pipe(duplex=False)
        self._workers = {info.id: WorkerHandle(info, ctx, engine, dataclasses.replace(backoff), clock)
                         for info in infos}  # fmt: skip
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
        instances: dict[str, int] | None = None,
    ) -> dict[str, dict]:
        """Load a model on every worker (with `instances`, {vgpu_id: executor instances}, on those
        vGPUs only); returns {vgpu_id: executor description}. Raises the first worker's error if any
        worker failed to load it. With `batch` (needed by `submit_rows`),
        every batch size up to `max_batch` times every padded length in `lengths` is built and run
        once before this returns, and the description says how many bytes one row's outputs take
        at most (`out_row_bytes`)."""
        futures = {}
        with self._lock:
            self._check_open()
            for vid, worker in self._workers.items():
                if instances is not None and vid not in instances:
                    continue
                message = Load(next(self._ids), name, os.fspath(onnx_path), executor or self.executor,
                               max_batch, batch, tuple(lengths), instances and instances[vid])
                worker.models[name] = message
                futures[vid] = self._dispatch(worker, Request(message.req, Future(), message))
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
                futures.append(self._dispatch(worker, Request(message.req, Future(), message)))
        for future in futures:
            future.result(timeout)

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
        return self._start(worker, Request(message.req, Future(), message))

    def _live_worker(self, vgpu_id: str) -> WorkerHandle:
        worker = self._workers.get(vgpu_id)
        if worker is None:
            raise KeyError(f"unknown vGPU {vgpu_id!r}; have {', '.join(self._workers)}")
        if self._closed:
            raise PoolClosed("pool closed")
        if not worker.state.alive:
            raise PoolClosed(f"vGPU {vgpu_id} is dead: {worker.state.error}")
        return worker

    def _start(self, worker: WorkerHandle, request: Request) -> Future:
        request.future.set_running_or_notify_cancel()  # a batch in flight cannot be cancelled
        with self._lock:
            if self._closed:
                self._finish(worker, request, exception=PoolClosed("pool closed"))
                return request.future
            return self._dispatch(worker, request)

    def close(self, timeout: float = 10.0) -> None:
        """Stop every worker and fail what is still in flight."""
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

    def _dispatch(self, worker: WorkerHandle, request: Request) -> Future:
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
                    stalled, stalls = note_stalls(self._workers.values(), now, self.stall_s)
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

    def _receive(self, worker: WorkerHandle) -> None:
        """One reply: the selector said there is one (Connection.poll builds a selector per call)."""
        try:
            self._on_reply(worker, worker.conn.recv())
        except (EOFError, OSError):  # pipe closed: the sentinel reports the death
            pass

    def _drain(self, worker: WorkerHandle) -> None:
        try:
            while worker.conn.poll():
                self._on_reply(worker, worker.conn.recv())
        except (EOFError, OSError):
            pass

    def _on_reply(self, worker: WorkerHandle, reply) -> None:
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
            case RanRows(layouts=layouts):
                self._ran(worker, reply)
                self._finish(worker, request, result=layouts)

    def _ran(self, worker: WorkerHandle, reply: RanRows) -> None:
        worker.state.last_batch_seconds = reply.seconds
        worker.slowest_batch = max(worker.slowest_batch, reply.seconds)
        worker.state.program_builds = worker.builds_before + reply.program_builds

    def _finish(
        self, worker: WorkerHandle, request: Request, result=None, exception: BaseException | None = None
    ) -> None:
        if request.future.done():
            return
        if exception is not None:
            request.future.set_exception(exception)
        else:
            request.future.set_result(result)

