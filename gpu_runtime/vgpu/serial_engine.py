"""The vGPU worker's default engine: whole batches, each priority on its own lane.

A running batch is never interrupted (`scheduler.vgpu_engine` preempts kernel programs). RT batches
get a lane of their own (SCHED_FIFO where the OS permits); BE batches run on threads of a lowered OS
priority, one per core of a CPU vGPU, each session on one thread. Executors that are not reentrant
run one batch of a model at a time, so there an RT batch overtakes every queued BE batch and waits
only for the running one. The engine contract a worker relies on (prepare, load, warm_up, unload,
run, close) and the figures behind these choices: docs/scheduling.md.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from concurrent.futures import Future

from gpu_runtime import executors as vgpu_executors
from gpu_runtime.priority import Priority, prioritise_this_thread
from gpu_runtime.thread_names import name_this_thread
from gpu_runtime.vgpu.batches import batch_sizes


class SerialEngine:
    name = "serial"

    def __init__(self, info):
        self.info = info
        self.models: dict[str, object] = {}
        be_threads = (info.threads or 1) if info.kind == "cpu" else 1
        self._lanes = {Priority.RT: _Lane(Priority.RT), Priority.BE: _Lane(Priority.BE, be_threads)}
        # each lane's batch on one thread (see the module docstring)
        self._session_info = dataclasses.replace(info, threads=1) if be_threads > 1 else info

    def load(self, model: str, onnx_path: str, executor: str, max_batch: int | None,
             lengths: tuple[int, ...] = (), instances: int | None = None) -> dict:
        """`instances`: the model's executor instances here (None: one, shared by as many batches
        at once as the lanes run where the executor is reentrant)."""
        spec = vgpu_executors.spec(executor)
        load = vgpu_executors.loader(executor)
        runners = [load(onnx_path, self._session_info, max_batch) for _ in range(instances or 1)]
        static = spec.program_executor is not None  # not reentrant: one batch per instance
        self.models[model] = _Instances(runners, bool(instances) or static, self._wake_lanes)
        if instances:
            self._lanes[Priority.BE].grow(instances)
        return {**runners[0].describe(), "scheduler": self.name, "instances": len(runners),
                "batch_sizes": list(batch_sizes(max_batch) if static else ())}

    def prepare(self, executor: str) -> None:
        """Nothing: the lanes started with the engine."""

    def warm_up(self, model: str, inputs: dict):
        instances = self._instances(model)
        runner = instances.take()
        try:
            return _timed(runner, inputs)
        finally:
            instances.give_back(runner)

    def unload(self, model: str) -> None:
        self.models.pop(model, None)

    def run(self, model: str, inputs: dict, priority: str = Priority.BE) -> Future:
        return self._lanes[Priority.of(priority)].put(lambda: self._instances(model), _timed, inputs)

    def close(self) -> None:
        for lane in self._lanes.values():
            lane.close()

    def _instances(self, model: str) -> _Instances:
        instances = self.models.get(model)
        if instances is None:
            raise KeyError(f"model {model!r} is not loaded on {self.info.id}")
        return instances

    def _wake_lanes(self) -> None:
        for lane in self._lanes.values():
            lane.wake()


def _timed(runner, inputs: dict):
    start = time.perf_counter()
    outputs = runner.run(inputs)
    return outputs, time.perf_counter() - start


class _Instances:
    """A model's executors on this vGPU. Limited: a batch takes a free one and gives it back (one
    batch per instance); else the one executor serves every batch at once."""

    def __init__(self, runners: list, limited: bool, on_free):
        self._runners = runners
        self._free = list(runners) if limited else None
        self._freed = threading.Condition()
        self._on_free = on_free

    def try_take(self):
        """A free instance, or None."""
        if self._free is None:
            return self._runners[0]
        with self._freed:
            return self._free.pop() if self._free else None

    def take(self):
        """A free instance, waiting for one (a load's warm-up, on the loader thread)."""
        if self._free is None:
            return self._runners[0]
        with self._freed:
            self._freed.wait_for(lambda: self._free)
            return self._free.pop()

    def give_back(self, runner) -> None:
        if self._free is None:
            return
        with self._freed:
            self._free.append(runner)
            self._freed.notify()
        self._on_free()


class _Lane:
    """Threads taking their queue's batches in order, at their priority's OS priority; a batch whose
    model has no free instance waits, and those behind it go first."""

    def __init__(self, priority: Priority, threads: int = 1):
        self._priority = priority
        self._queue: deque = deque()
        self._ready = threading.Condition()
        self._closed = False
        self._threads: list[threading.Thread] = []
        self.grow(threads)

    def grow(self, threads: int) -> None:
        """At least `threads` threads from now on."""
        with self._ready:
            for i in range(len(self._threads), threads):
                thread = threading.Thread(target=self._loop, name=f"exec-{self._priority}{i}", daemon=True)
                self._threads.append(thread)
                thread.start()

    def put(self, instances, fn, *args) -> Future:
        """Run `fn(instance, *args)` on an instance of `instances()` (called on the lane's thread)."""
        future: Future = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("engine closed")
            self._queue.append((future, instances, fn, args))
            self._ready.notify()
        return future

    def wake(self) -> None:
        """An instance came free: a waiting batch may go now."""
        with self._ready:
            self._ready.notify_all()

    def close(self) -> None:
        """Fail the queued batches at once, then wait for the running ones."""
        with self._ready:
            self._closed = True
            queued, self._queue = self._queue, deque()
            self._ready.notify_all()
            threads = list(self._threads)
        for future, *_ in queued:
            future.set_exception(RuntimeError("vGPU worker stopped before the batch ran"))
        for thread in threads:
            thread.join()

    def _next(self):
        """The first queued batch with a free instance, taken off the queue with it; else None."""
        for index, (future, instances, fn, args) in enumerate(self._queue):
            try:
                owner = instances()
                runner = owner.try_take()
            except Exception as exc:  # e.g. its model was unloaded: reported to the caller
                del self._queue[index]
                future.set_exception(exc)
                return self._next()
            if runner is not None:
                del self._queue[index]
                return future, owner, runner, fn, args
        return None

    def _loop(self) -> None:
        name_this_thread()
        prioritise_this_thread(self._priority)
        while True:
            with self._ready:
                while not self._closed and (taken := self._next()) is None:
                    self._ready.wait()
                if self._closed:
                    return
            future, owner, runner, fn, args = taken
            try:
                future.set_result(fn(runner, *args))
            except Exception as exc:  # reported to the caller; the engine keeps serving
                future.set_exception(exc)
            finally:
                owner.give_back(runner)
            # Hold nothing while waiting: a batch's inputs may view a slot arena, which stays mapped
            # (after its model's unload) as long as a view of it lives.
            del future, owner, runner, fn, args, taken
