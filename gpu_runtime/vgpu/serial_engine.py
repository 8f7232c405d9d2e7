"""The vGPU worker's default engine: whole batches, each priority on its own lane.

A running batch is never interrupted (`scheduler.vgpu_engine` preempts kernel programs). RT batches
get a lane of their own (SCHED_FIFO where the OS permits); BE batches run on threads of a lowered OS
priority, one per core of a CPU vGPU, each session on one thread. Executors that are not reentrant
run one batch of a model at a time, so there an RT batch overtakes every queued BE batch and waits
only for the running one. The engine contract a worker relies on (prepare, load, warm_up, unload,
run, close) and the figures behind these choices: docs/scheduling.md.
"""

from __future__ import annotations

import contextlib
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
        self._guards: dict[str, contextlib.AbstractContextManager] = {}
        be_threads = (info.threads or 1) if info.kind == "cpu" else 1
        self._lanes = {Priority.RT: _Lane(Priority.RT), Priority.BE: _Lane(Priority.BE, be_threads)}
        # each lane's batch on one thread (see the module docstring)
        self._session_info = dataclasses.replace(info, threads=1) if be_threads > 1 else info

    def load(self, model: str, onnx_path: str, executor: str, max_batch: int | None,
             lengths: tuple[int, ...] = ()) -> dict:
        spec = vgpu_executors.spec(executor)
        self.models[model] = vgpu_executors.loader(executor)(onnx_path, self._session_info, max_batch)
        static = spec.program_executor is not None
        self._guards[model] = threading.Lock() if static else contextlib.nullcontext()
        return {**self.models[model].describe(), "scheduler": self.name,
                "batch_sizes": list(batch_sizes(max_batch) if static else ())}

    def prepare(self, executor: str) -> None:
        """Nothing: the lanes started with the engine."""

    def warm_up(self, model: str, inputs: dict):
        return self._run(model, inputs)

    def unload(self, model: str) -> None:
        self.models.pop(model, None)
        self._guards.pop(model, None)

    def run(self, model: str, inputs: dict, priority: str = Priority.BE) -> Future:
        return self._lanes[Priority.of(priority)].put(self._run, model, inputs)

    def close(self) -> None:
        for lane in self._lanes.values():
            lane.close()

    def _run(self, model: str, inputs: dict):
        runner = self.models.get(model)
        if runner is None:
            raise KeyError(f"model {model!r} is not loaded on {self.info.id}")
        with self._guards[model]:
            start = time.perf_counter()
            outputs = runner.run(inputs)
            return outputs, time.perf_counter() - start


class _Lane:
    """Threads taking their queue's batches in order, at their priority's OS priority."""

    def __init__(self, priority: Priority, threads: int = 1):
        self._queue: deque = deque()
        self._ready = threading.Condition()
        self._closed = False
        self._threads = [threading.Thread(target=self._loop, args=(priority,), name=f"exec-{priority}{i}",
                                          daemon=True) for i in range(threads)]  # fmt: skip
        for thread in self._threads:
            thread.start()

    def put(self, fn, *args) -> Future:
        future: Future = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("engine closed")
            self._queue.append((future, fn, args))
            self._ready.notify()
        return future

    def close(self) -> None:
        """Fail the queued batches at once, then wait for the running ones."""
        with self._ready:
            self._closed = True
            queued, self._queue = self._queue, deque()
            self._ready.notify_all()
        for future, _, _ in queued:
            future.set_exception(RuntimeError("vGPU worker stopped before the batch ran"))
        for thread in self._threads:
            thread.join()

    def _loop(self, priority: Priority) -> None:
        name_this_thread()
        prioritise_this_thread(priority)
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._queue or self._closed)
                if self._closed:
                    return
                future, fn, args = self._queue.popleft()
            try:
                future.set_result(fn(*args))
            except Exception as exc:  # reported to the caller; the engine keeps serving
                future.set_exception(exc)
            # Hold nothing while waiting: a batch's inputs may view a slot arena, which stays mapped
            # (after its model's unload) as long as a view of it lives.
            del future, fn, args
