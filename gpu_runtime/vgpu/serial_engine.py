"""The vGPU worker's default engine: one batch at a time, real-time batches first.

A running batch is never interrupted (onnxruntime cannot be, and this engine does not try with the
kernel-program executors either: `scheduler.vgpu_engine` does). What it does give real-time work is
the queue: an RT batch overtakes every BE batch that has not started yet. Loads go through the same
thread, ahead of both, so a model is never loaded while a batch runs, and a model reloaded after a
worker restart is in place before the batches re-sent to it.

An engine, for the worker: built as `engine(info)` in the worker process; `load(model, onnx_path,
executor, max_batch) -> describe()`; `run(model, inputs, priority) -> Future of (outputs, compute
seconds)`, resolved from any thread; `close()`, which fails whatever has not run.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from concurrent.futures import Future

from gpu_runtime import executors as vgpu_executors

RT, BE = "rt", "be"
_RANK = {"load": 0, RT: 1, BE: 2}


class SerialEngine:
    name = "serial"

    def __init__(self, info):
        self.info = info
        self.models: dict[str, object] = {}
        self._heap: list = []
        self._order = itertools.count()
        self._ready = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="vgpu-serial", daemon=True)
        self._thread.start()

    def load(self, model: str, onnx_path: str, executor: str, max_batch: int | None) -> dict:
        return self._put("load", self._load, model, onnx_path, executor, max_batch).result()

    def run(self, model: str, inputs: dict, priority: str = BE) -> Future:
        if priority not in (RT, BE):
            raise ValueError(f"priority must be {RT!r} or {BE!r}, got {priority!r}")
        return self._put(priority, self._run, model, inputs)

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify()
        self._thread.join()
        for _, _, future, _, _ in self._heap:
            future.set_exception(RuntimeError("vGPU worker stopped before the batch ran"))

    def _put(self, kind: str, fn, *args) -> Future:
        future: Future = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("engine closed")
            heapq.heappush(self._heap, (_RANK[kind], next(self._order), future, fn, args))
            self._ready.notify()
        return future

    def _loop(self) -> None:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._heap or self._closed)
                if self._closed:
                    return
                *_, future, fn, args = heapq.heappop(self._heap)
            try:
                future.set_result(fn(*args))
            except Exception as exc:  # reported to the caller; the engine keeps serving
                future.set_exception(exc)

    def _load(self, model: str, onnx_path: str, executor: str, max_batch: int | None) -> dict:
        self.models[model] = vgpu_executors.loader(executor)(onnx_path, self.info, max_batch)
        return {**self.models[model].describe(), "scheduler": self.name}

    def _run(self, model: str, inputs: dict):
        runner = self.models.get(model)
        if runner is None:
            raise KeyError(f"model {model!r} is not loaded on {self.info.id}")
        start = time.perf_counter()
        outputs = runner.run(inputs)
        return outputs, time.perf_counter() - start
