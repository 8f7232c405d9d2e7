"""The models a front end runs itself, on CPU vGPUs (`supervisor/colocation.py` says which and
why): one onnxruntime session per model, on one thread per call, shared by the lanes (a session
takes calls from several threads at once). A best-effort request's row is made and inferred on
one lane, in a batch with the rows of its model that wait there (`lanes.Batched`), so its tensor
is read in the cache it was just written to, and its outputs go straight to the answer: no slot,
no `Submit`, no `Done`.
"""

from __future__ import annotations

import time

import numpy as np
from gpu_runtime.executors.ort_executor import OrtExecutor

from atoll.repository.specs import ModelSpec


# The most rows a lane runs at once: larger batches keep a lane busy longer, and the real-time
# lane and the next batch wait behind it, for little saved per row (docs/data-plane.md, "Settings
# that rest on a measurement").
LANE_BATCH_MAX = 8


class LocalModels:
    def __init__(self, metrics):
        self.metrics = metrics
        self._sessions: dict[str, OrtExecutor] = {}

    @staticmethod
    def build(spec: ModelSpec) -> OrtExecutor:
        """The session (slow: off the event loop); nothing runs on it before the first request, as
        on the vGPU workers' onnxruntime, which runs only the config's `model_warmup`."""
        return OrtExecutor(spec.path, intra_op_threads=1)  # one thread: the lane's own

    def add(self, key: str, session: OrtExecutor) -> None:
        self._sessions[key] = session

    def remove(self, key: str) -> None:
        self._sessions.pop(key, None)

    def __contains__(self, key: str) -> bool:
        return key in self._sessions

    def run(self, spec: ModelSpec, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
        """One batch (each input with its batch dimension, in the spec's order) on the calling
        thread; its outputs by name."""
        session = self._sessions[spec.key]
        start = time.monotonic()
        outputs = session.run({t.name: a for t, a in zip(spec.inputs, inputs)})
        self.metrics.batch_ran(spec.name, spec.version, len(inputs[0]), time.monotonic() - start)
        return outputs
