"""The parts a `Supervisor` builds, through one factory: the vGPU pool, the Python models'
instances, the batching settings, the dispatcher, the front ends' channels and how many front ends
there are. `Supervisor(..., parts=...)` takes another factory, so a test builds the supervisor over
stand-ins by overriding the methods it needs, never by assigning its private fields."""

from __future__ import annotations

import os

from gpu_runtime.vgpu.pool import WorkerPool
from scheduler.vgpu_engine import engine_for

from atoll.config import Config
from atoll.pybackend.instances import PythonModels
from atoll.supervisor.dispatcher import Dispatcher
from atoll.supervisor.lifecycle import shielded
from atoll.supervisor.model_batching import Batching
from atoll.wire.control import FrontEnds

CORES_PER_FRONT_END = 4


class Parts:
    """The real parts; each method is called once, by `Supervisor.assemble` (and `__init__` for the
    channels)."""

    def channels(self) -> FrontEnds:
        return FrontEnds()

    def front_end_count(self, config: Config) -> int:
        """One front end per few cores, each with a preprocessing thread per core of its share: fewer
        processes to wake, and Done messages shared by more rows (measured: docs/data-plane.md)."""
        return config.server.front_ends or max(1, len(os.sched_getaffinity(0)) // CORES_PER_FRONT_END)

    def batching(self, config: Config, kinds: dict[str, str], latency, slots: dict[str, int],
                 switch_time) -> Batching:
        return Batching(config, kinds, latency, slots, switch_time)

    def pool(self, config: Config, vgpus: list, executor: str | None, residency, on_change) -> WorkerPool:
        # Every worker schedules its batches with REEF (`[scheduler]`) where the executor can be
        # preempted (numpy, cupy); onnxruntime models run on per-priority lanes there.
        s = config.scheduler
        engine = engine_for(s.policy, s.outstanding_kernels, residency)
        with shielded():  # workers, and the pool's threads that restart them, never see a stop signal
            return WorkerPool(vgpus, executor=executor, engine=engine, on_change=on_change)

    def python(self, url: str, on_change) -> PythonModels:
        return PythonModels(url, on_change)

    def dispatcher(self, pool, batcher, metrics, latency, kinds: dict[str, str], python, residency) -> Dispatcher:
        return Dispatcher({}, pool, batcher, metrics, latency, kinds, python=python, residency=residency)
