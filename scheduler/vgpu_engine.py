"""REEF inside a vGPU worker: the engine that runs the worker's batches through `reef.Reef`.

`WorkerPool(..., engine=functools.partial(ReefEngine, policy=..., capacity=...))` makes every worker
schedule its batches as REEF tasks: real-time batches preempt best-effort ones (reset-based under
`reset`/`reef`, padded under `reef`), best-effort batches of different models and shapes run
concurrently on the vHQ streams, and a preempted batch resumes from its last completed kernel.

A Reef client is one loaded program state, so the engine keeps one per (model, priority, batch,
length). Programs for every shape the model will be sent (the batch sizes of
`gpu_runtime.vgpu.batches.batch_sizes` up to `max_batch`, times each padded length) are built at
load, for both priorities, so neither an RT nor a BE batch pays for an import or NVRTC when it
arrives.

Only the kernel-program executors can be preempted. Models loaded with onnxruntime, and every
model on a green-context vGPU (the scheduler's CUDA streams are made in the primary context, not
the partition's), run on a `SerialEngine` beside the scheduler: RT batches on a lane of their own.
"""

from __future__ import annotations

import functools
from concurrent.futures import Future

from gpu_runtime.compiler.shapes import ModelShapes
from gpu_runtime.executors import EXECUTORS, program_executor
from gpu_runtime.priority import Priority
from gpu_runtime.vgpu.batches import batch_sizes
from gpu_runtime.vgpu.serial_engine import SerialEngine
from scheduler.cpu_device import CpuDevice
from scheduler.cuda_device import CudaDevice
from scheduler.policies import make_policy
from scheduler.reef import DEFAULT_CAPACITY, Reef


class ReefEngine:
    def __init__(self, info, policy: str = "reset", capacity: int = DEFAULT_CAPACITY):
        make_policy(policy)  # an unknown policy fails the worker's start-up, with the choices
        self.info = info
        self.policy = policy
        self.capacity = capacity
        self.reef: Reef | None = None
        self._executor: str | None = None
        self._serial: SerialEngine | None = None
        self._shapes: dict[str, ModelShapes] = {}
        self._serial_models: set[str] = set()

    # ---- the engine contract (gpu_runtime.vgpu.serial_engine) -------------------------------------
    def prepare(self, executor: str) -> None:
        if executor not in EXECUTORS:  # the load names the choices
            return
        if self._runs_serially(executor):
            self._serial_engine()
        else:
            self._scheduler(executor)

    def load(self, model: str, onnx_path: str, executor: str, max_batch: int | None,
             lengths: tuple[int, ...] = ()) -> dict:
        if self._runs_serially(executor):
            described = self._serial_engine().load(model, onnx_path, executor, max_batch, lengths)
            self._serial_models.add(model)
            self._shapes.pop(model, None)
            return described
        reef = self._scheduler(executor)
        shapes = ModelShapes(onnx_path)
        self._shapes[model] = shapes
        self._serial_models.discard(model)
        sizes = batch_sizes(max_batch)
        for key in ((batch, length) for batch in sizes for length in lengths or (None,)):
            for priority in Priority:
                self._add_client(model, shapes, priority, key)
        reef.prepare_padding()
        return {"executor": executor, "preemptible": True, "scheduler": self.policy,
                "batch_sizes": list(sizes)}

    def warm_up(self, model: str, inputs: dict):
        """Serial models run in the calling thread; REEF's only run on the scheduler's streams."""
        if model in self._serial_models:
            return self._serial_engine().warm_up(model, inputs)
        return self.run(model, inputs, Priority.BE).result()

    def unload(self, model: str) -> None:
        """The model can no longer run. Its REEF clients stay built until the worker stops: the
        scheduler has no way to remove a client, and a reload under the same name replaces them."""
        if model in self._serial_models:
            self._serial_models.discard(model)
            self._serial_engine().unload(model)
        self._shapes.pop(model, None)

    def run(self, model: str, inputs: dict, priority: str = Priority.BE) -> Future:
        if model in self._serial_models:
            return self._serial_engine().run(model, inputs, priority)
        shapes = self._shapes.get(model)
        if shapes is None:
            raise KeyError(f"model {model!r} is not loaded on {self.info.id}")
        key = shapes.key(inputs)
        priority = Priority.of(priority)
        name = _client_name(model, priority, key)
        if not self.reef.has_client(name):  # a shape not built at load (the worker counts it)
            self._add_client(model, shapes, priority, key)
            self.reef.prepare_padding()
        done: Future = Future()
        self.reef.submit(name, inputs).add_done_callback(lambda task: _resolve(done, task))
        return done

    def close(self) -> None:
        if self.reef is not None:
            self.reef.stop()
            self.reef.device.close()
        if self._serial is not None:
            self._serial.close()

    # ---- internals ------------------------------------------------------------------------------
    def _runs_serially(self, executor: str) -> bool:
        """Whether `executor`'s models run beside the scheduler (see the module docstring)."""
        spec = EXECUTORS[executor]
        return not spec.preemptible or bool(spec.gpu and self.info.green_context)

    def _serial_engine(self) -> SerialEngine:
        if self._serial is None:
            self._serial = SerialEngine(self.info)
        return self._serial

    def _scheduler(self, executor: str) -> Reef:
        if self.reef is not None:
            if executor != self._executor:
                raise ValueError(f"{self.info.id} schedules {self._executor} programs; one vGPU"
                                 f" cannot mix them with {executor}")  # fmt: skip
            return self.reef
        if EXECUTORS[executor].gpu:
            ex = program_executor(executor)()
            device, streams = CudaDevice(ex), 4
        else:
            # A stream is a CPU vGPU's unit of parallelism: one BLAS thread each, and as many BE
            # streams as the vGPU has cores.
            ex = program_executor(executor)(blas_threads=1)
            device, streams = CpuDevice(ex), max(1, self.info.threads or len(self.info.cpus) or 1)
        self.reef = Reef(ex, device, self.policy, capacity=self.capacity, be_streams=streams).start()
        self._executor = executor
        return self.reef

    def _add_client(self, model: str, shapes: ModelShapes, priority: str, key) -> None:
        name = _client_name(model, priority, key)
        self.reef.add_client(name, shapes.program(key, name=name), priority)


def _client_name(model: str, priority: str, key) -> str:
    batch, length = key
    return f"{model}/{priority}/b{batch}" + (f"/l{length}" if length is not None else "")


def _resolve(done: Future, task: Future) -> None:
    """The worker's reply: outputs and the time from the batch's first kernel to its end."""
    try:
        result = task.result()
    except Exception as exc:
        done.set_exception(exc)
        return
    done.set_result((result.outputs, result.end_s - result.first_kernel_s))


def engine_for(policy: str, capacity: int = DEFAULT_CAPACITY):
    """What to hand `WorkerPool(engine=...)`: picklable, so spawned workers can build it."""

    return functools.partial(ReefEngine, policy=policy, capacity=capacity)

