"""A ReefEngine for tests that need an RT batch to arrive in the middle of a BE batch, inside the
worker process and without sleeps (spawn imports this module by name). While `<model>.hold` exists
beside a model's ONNX file, a BE batch's first kernel waits until an RT batch has been handed to the
scheduler, and an RT batch is handed over only once such a kernel is running."""

from __future__ import annotations

import threading
from pathlib import Path

from gpu_runtime.priority import Priority
from scheduler.vgpu_engine import ReefEngine


class HeldReefEngine(ReefEngine):
    def __init__(self, info, **kwargs):
        super().__init__(info, **kwargs)
        self._holds: dict[str, Path] = {}
        self._be_running, self._rt_submitted = threading.Event(), threading.Event()
        self._launch = None

    def load(self, model, onnx_path, executor, max_batch, lengths=(), instances=None):
        self._holds[model] = Path(onnx_path).with_suffix(".hold")
        return super().load(model, onnx_path, executor, max_batch, lengths, instances)

    def run(self, model, inputs, priority=Priority.BE):
        if Priority.of(priority) is not Priority.RT or not self._holds[model].exists():
            return super().run(model, inputs, priority)
        if not self._be_running.wait(60):
            raise TimeoutError("no BE batch of a held model started")
        future = super().run(model, inputs, priority)
        self._rt_submitted.set()
        return future

    def _scheduler(self, executor):
        reef = super()._scheduler(executor)
        if self._launch is None:  # the executor's launches, first BE kernels held
            self._launch = reef.executor.launch
            reef.executor.launch = self._held_launch
        return reef

    def _held_launch(self, state, index, stream=None):
        model, priority = state.program.model.split("/")[:2]
        if index == 0 and priority == Priority.BE and self._holds[model].exists():
            self._be_running.set()
            if not self._rt_submitted.wait(60):
                raise TimeoutError("no RT batch came")
        self._launch(state, index, stream)
