"""The supervisor's side of Python-backend models: each instance a process, each watched by a thread.

`PythonModels` stands beside the vGPU worker pool with the same `submit_rows` call, so the
dispatcher sends it a request's slot rows as it sends a batch to a vGPU. Per model, requests wait
in one queue; an instance that is free takes the oldest and, for a batching model, those behind it
up to `max_batch_size` rows, and runs them in one `execute` call (Triton's python backend receives
such a list from its dynamic batcher). Containment: an instance whose `execute` raises answers its
requests with the error and serves on; one that runs past `atoll.execute_timeout_s` is killed; one
that dies fails the requests it held (with the reason), and both are started again (`initialize`
anew, with the vGPU workers' back-off), the model served meanwhile by its other instances.
"""

from __future__ import annotations

import itertools
import json
import logging
import multiprocessing
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from gpu_runtime.thread_names import name_this_thread
from gpu_runtime.vgpu import shm
from gpu_runtime.vgpu.backoff import Backoff
from gpu_runtime.vgpu.messages import Row
from gpu_runtime.vgpu.slots import row_layout

from atoll.kserve.datatypes import DTYPES
from atoll.pybackend.instance import instance_main
from atoll.pybackend.messages import Execute, Executed, InstanceSetup, StartFailed, Stop, Streamed
from atoll.repository.specs import ModelSpec

log = logging.getLogger(__name__)
START_TIMEOUT_S = 300.0  # importing model.py and `initialize` (which may load weights)
STOP_S = 5.0


class InstanceError(RuntimeError):
    """A request a Python model's instance could not answer: the model's error, a hang, a death."""


@dataclass
class _Job:
    rows: tuple[Row, ...]
    future: Future
    on_stream: Callable[[Streamed], None] | None  # a decoupled model's responses, as they come
    deadline: float  # time.monotonic() after which nobody waits for its answer


class _Queue:
    """A model's waiting requests; `take` hands an instance the oldest and those that fit behind it,
    answering those whose deadline passed meanwhile unexecuted."""

    def __init__(self):
        self._jobs: deque[_Job] = deque()
        self._ready = threading.Condition()
        self._closed = False

    def put(self, job: _Job) -> None:
        with self._ready:
            if self._closed:
                raise InstanceError("the model is unloaded")
            self._jobs.append(job)
            self._ready.notify()

    def take(self, max_rows: int) -> list[_Job] | None:
        """The next call's requests (at most `max_rows` rows, at least one request); None once closed."""
        jobs, rows, expired = [], 0, []
        with self._ready:
            while not jobs:
                while not self._jobs and not self._closed:
                    self._ready.wait()
                if self._closed:
                    return None
                now = time.monotonic()
                while self._jobs and (not jobs or rows + len(self._jobs[0].rows) <= max_rows):
                    job = self._jobs.popleft()
                    if job.deadline <= now:
                        expired.append(job)
                        continue
                    jobs.append(job)
                    rows += len(job.rows)
                for job in expired:
                    job.future.set_exception(InstanceError("its deadline passed before an instance took it"))
                expired.clear()
            return jobs

    def close(self) -> list[_Job]:
        with self._ready:
            self._closed = True
            self._ready.notify_all()
            left, self._jobs = list(self._jobs), deque()
            return left


class _Instance:
    def __init__(self, model: _Model, setup: InstanceSetup, ctx):
        self.model, self.setup, self.ctx = model, setup, ctx
        self.name = f"{setup.model}/{setup.instance}"
        self.backoff = Backoff()
        self.process = self.conn = None
        self.live = False
        self.thread: threading.Thread | None = None
        self.calls = itertools.count()

    def start(self) -> None:
        """Start the process and wait for its `initialize`; raises InstanceError with its reason."""
        self.conn, child = self.ctx.Pipe()
        self.process = self.ctx.Process(target=instance_main, args=(child, self.setup), daemon=True,
                                        name=f"atoll-py-{self.name}")  # fmt: skip
        self.process.start()
        child.close()
        self.backoff.started(time.monotonic())
        try:
            if not self.conn.poll(START_TIMEOUT_S):
                raise InstanceError(f"initialize did not finish within {START_TIMEOUT_S:g} s")
            reply = self.conn.recv()
        except (EOFError, OSError):
            reply = StartFailed(f"its process exited (code {self._exit_code()}) while loading")
        except InstanceError:
            self._kill()
            raise
        if isinstance(reply, StartFailed):
            self._kill()
            raise InstanceError(reply.reason)
        self.live = True

    def serve(self) -> None:
        self.thread = threading.Thread(target=self._serve, name=f"atoll-py-{self.name}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        name_this_thread("atoll-py-hop")  # its stage in the CPU account of `atoll bench serve`
        spec = self.model.spec
        while (jobs := self.model.queue.take(max(spec.max_batch_size, 1))) is not None:
            if not self.live and not self._restart():
                for job in jobs:
                    job.future.set_exception(InstanceError(f"{self.name}: the model is unloaded"))
                continue
            self._run(jobs)
        self.stop()

    def _run(self, jobs: list[_Job]) -> None:
        if not self.process.is_alive():  # it died while idle: started again before it takes the requests
            log.error("%s: instance %d died (exit code %s) while idle; it is started again", self.model.spec.name,
                      self.setup.instance, self._exit_code())  # fmt: skip
            self._kill()
            self.model.changed()
            if not self._restart():
                for job in jobs:
                    job.future.set_exception(InstanceError(f"{self.name}: the model is unloaded"))
                return None
        timeout, call = self.model.spec.python.execute_timeout_s, next(self.calls)
        try:
            self.conn.send(Execute(call, tuple(job.rows for job in jobs)))
        except OSError:
            return self._lost(jobs, f"died (exit code {self._exit_code()}) before taking the request")
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.conn.poll(left):
                return self._lost(jobs, f"ran past atoll.execute_timeout_s ({timeout:g} s): killed")
            try:
                reply = self.conn.recv()
            except (EOFError, OSError):
                return self._lost(jobs, f"died (exit code {self._exit_code()}) running the request")
            if reply.call != call:  # an earlier call's model thread answering late: nobody waits for it
                if isinstance(reply, Streamed) and reply.segment is not None:
                    shm.unlink(reply.segment)
            elif isinstance(reply, Streamed):
                self._stream(jobs[reply.request], reply)
            elif isinstance(reply, Executed):
                for job, result in zip(jobs, reply.results):
                    if isinstance(result, str):
                        job.future.set_exception(InstanceError(result))
                    else:  # a decoupled model's answers went by Streamed: nothing in the slots
                        job.future.set_result(result or tuple([] for _ in job.rows))
                return None

    @staticmethod
    def _stream(job: _Job, reply: Streamed) -> None:
        if job.on_stream is not None:
            job.on_stream(reply)
        elif reply.segment is not None:  # nobody to read it
            shm.unlink(reply.segment)

    def _lost(self, jobs: list[_Job], what: str) -> None:
        """The process hung or died: its requests fail, it is killed and started again."""
        reason = f"{self.model.spec.name}: instance {self.setup.instance} {what}; it is started again"
        log.error("%s", reason)
        self._kill()
        for job in jobs:
            job.future.set_exception(InstanceError(reason))
        self.model.changed()
        self._restart()

    def _restart(self) -> bool:
        """Start the process again (after the back-off); False once the model is unloaded."""
        while not self.model.closed:
            time.sleep(self.backoff.delay(time.monotonic()))
            try:
                self.start()
            except InstanceError as exc:
                log.error("%s: instance %d did not start again: %s", self.model.spec.name, self.setup.instance, exc)
                continue
            log.info("%s: instance %d started again", self.model.spec.name, self.setup.instance)
            self.model.restarted()
            self.model.changed()
            return True
        return False

    def _exit_code(self):
        if self.process is not None:
            self.process.join(0.5)
            return self.process.exitcode
        return None

    def _kill(self) -> None:
        self.live = False
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        if self.process is not None:
            self.process.join()
        if self.conn is not None:
            self.conn.close()

    def stop(self) -> None:
        """`finalize` and exit (killed if it takes longer than STOP_S)."""
        if self.live:
            try:
                self.conn.send(Stop())
            except OSError:
                pass
            self.process.join(STOP_S)
        self._kill()


class _Model:
    def __init__(self, spec: ModelSpec, on_change: Callable[[], None], on_restart: Callable[[], None]):
        self.spec = spec
        self.queue = _Queue()
        self.instances: list[_Instance] = []
        self.closed = False
        self.changed, self.restarted = on_change, on_restart

    @property
    def ready(self) -> bool:
        return any(instance.live for instance in self.instances)


class PythonModels:
    def __init__(self, server_url: str, on_change: Callable[[], None] = lambda: None):
        """`server_url`: host:port of the server's HTTP endpoint (BLS requests go there);
        `on_change`: called (on any thread) when an instance dies or starts again."""
        self.server_url = server_url
        self.models: dict[str, _Model] = {}
        self._on_change = on_change
        self._ctx = multiprocessing.get_context("spawn")
        self._prefix = shm.segment_prefix()
        self._loads = itertools.count()
        self.restarts = 0  # instances started again after a hang or a death, every model's
        self._restarts_lock = threading.Lock()

    def _restarted(self) -> None:
        with self._restarts_lock:
            self.restarts += 1

    @staticmethod
    def out_row_bytes(spec: ModelSpec) -> int:
        """A slot's room for one row's outputs (a -1 dimension at its bound, `atoll.max_dim`)."""
        _, size = row_layout([(t.name, t.dims, DTYPES[t.datatype]) for t in spec.outputs], spec.dim_bound)
        return size

    def load(self, spec: ModelSpec) -> None:
        """Start every instance of `spec` and wait for their `initialize`; InstanceError if any fails
        (those started are stopped)."""
        if spec.python is None:
            raise ValueError(f"{spec.name} is not a Python-backend model")
        config = spec.config() | {"backend": "python", "model_transaction_policy": {"decoupled": spec.python.decoupled},
                                  "instance_group": [{"count": spec.python.instances, "kind": "KIND_CPU"}]}  # fmt: skip
        fields, _ = row_layout(spec.row_fields(), spec.dim_bound, spec.bytes_room)
        model = _Model(spec, self._on_change, self._restarted)
        load = next(self._loads)
        for index in range(spec.python.instances):
            setup = InstanceSetup(spec.name, spec.version, str(spec.python.file), index, json.dumps(config), fields,
                                  tuple(spec.outputs), spec.max_batch_size > 0, spec.python.decoupled,
                                  self.server_url, f"{self._prefix}-{load}-{index}")  # fmt: skip
            model.instances.append(_Instance(model, setup, self._ctx))
        errors: list[str] = []
        starting = [threading.Thread(target=self._start, args=(instance, errors), daemon=True)
                    for instance in model.instances]  # fmt: skip
        for thread in starting:
            thread.start()
        for thread in starting:
            thread.join()
        if errors:
            for instance in model.instances:
                instance.stop()
            raise InstanceError(errors[0])
        for instance in model.instances:
            instance.serve()
        self.models[spec.key] = model

    @staticmethod
    def _start(instance: _Instance, errors: list[str]) -> None:
        try:
            instance.start()
        except InstanceError as exc:
            errors.append(str(exc))

    def unload(self, key: str) -> None:
        """Stop the instances of a served version (`ModelSpec.key`; each calls `finalize`); requests
        still queued get an error."""
        model = self.models.pop(key, None)
        if model is None:
            return
        model.closed = True
        for job in model.queue.close():
            job.future.set_exception(InstanceError(f"{model.spec.name} version {model.spec.version} is unloaded"))
        for instance in model.instances:
            if instance.thread is not None:
                instance.thread.join(STOP_S + 1)

    def close(self) -> None:
        for name in list(self.models):
            self.unload(name)

    def ready_models(self) -> set[str]:
        return {name for name, model in self.models.items() if model.ready}

    def submit_rows(self, vgpu_id: str, model: str, rows: tuple[Row, ...], length: int | None = None,
                    priority=None, on_stream: Callable[[Streamed], None] | None = None,
                    deadline: float = float("inf")) -> Future:
        """One request's rows (the vGPU pool's call; `vgpu_id`, `length` and `priority` unused: a
        Python model's instances take requests in order). `on_stream` receives a decoupled model's
        responses (on an instance's thread); `deadline` (time.monotonic()) drops it unexecuted."""
        future: Future = Future()
        target = self.models.get(model)
        if target is None:
            raise InstanceError(f"no Python-backend model {model!r}")
        target.queue.put(_Job(rows, future, on_stream, deadline))
        return future
