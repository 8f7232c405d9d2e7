"""The pool's side of one worker process: its state, its requests in flight, its pipe and sender
thread (one set per incarnation: a dead worker's successor gets new ones, see `restarts.py`)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from gpu_runtime.priority import relay_this_thread
from gpu_runtime.thread_names import name_this_thread
from gpu_runtime.vgpu.backoff import Backoff
from gpu_runtime.vgpu.discovery import VGpuInfo
from gpu_runtime.vgpu.messages import Load, RunRows, Unload
from gpu_runtime.vgpu.worker import worker_main


@dataclass
class Request:
    req: int
    future: Future
    message: Load | Unload | RunRows
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


class WorkerHandle:
    """The pool's side of one vGPU's worker process, across its incarnations."""


    def __init__(self, info: VGpuInfo, ctx, engine, backoff: Backoff, clock: Callable[[], float]):
        self.state = WorkerState(info)
        self.clock = clock
        self.ctx = ctx
        self.engine = engine
        self.backoff = backoff
        self.inflight: dict[int, Request] = {}
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
            target=send_loop, args=(self.conn, self.outbox), name=f"send-{name}", daemon=True
        )
        self.sender.start()

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


def send_loop(conn, outbox: queue.SimpleQueue) -> None:
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
