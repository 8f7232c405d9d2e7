"""REEF inside a vGPU worker: the engine that runs the worker's batches through `reef.Reef`.

`engine_for(policy)` makes every worker schedule its batches as REEF tasks: RT batches preempt BE
ones, BE batches run concurrently on the vHQ streams, a preempted batch resumes from its last
completed kernel. A Reef client is one loaded program state, one per (model, priority, batch,
length), all built at load so no batch pays for an import or NVRTC. With device memory a model's
programs share one weight copy and one arena per priority, so its batches of one priority go to the
scheduler one at a time (`_Turns`). onnxruntime models and green-context vGPUs run on a
`SerialEngine` beside the scheduler. With a residency budget, a batch is first admitted by
`gpu_runtime.residency`, which may switch its model in while its launches (on GPUs its graphs) wait
for their layer groups (docs/residency.md). Details: docs/scheduling.md.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
from collections import deque
from concurrent.futures import Future

from gpu_runtime.compiler.shapes import ModelShapes
from gpu_runtime.executors import EXECUTORS, program_executor
from gpu_runtime.priority import Priority
from gpu_runtime.residency.manager import GatedExecutor, measure_launches
from gpu_runtime.residency.settings import ResidencySettings
from gpu_runtime.vgpu.batches import batch_sizes
from gpu_runtime.vgpu.serial_engine import SerialEngine
from scheduler.cpu_device import CpuDevice
from scheduler.cuda_device import CudaDevice
from scheduler.policies import make_policy
from scheduler.reef import DEFAULT_CAPACITY, Reef


class ReefEngine:
    def __init__(self, info, policy: str = "reset", capacity: int = DEFAULT_CAPACITY,
                 residency: ResidencySettings | None = None):
        make_policy(policy)  # an unknown policy fails the worker's start-up, with the choices
        self.info = info
        self._residency_settings = residency
        self.residency = None  # with a budget: gpu_runtime.residency (docs/residency.md)
        self.policy = policy
        self.capacity = capacity
        self.reef: Reef | None = None
        self._executor: str | None = None
        self._serial: SerialEngine | None = None
        self._shapes: dict[str, ModelShapes] = {}
        self._serial_models: set[str] = set()
        self._turns: dict[tuple[str, str], _Turns] = {}  # (model, priority) sharing an arena
        self._handoffs: queue.SimpleQueue = queue.SimpleQueue()
        self._handoff_thread: threading.Thread | None = None

    # ---- the engine contract (gpu_runtime.vgpu.serial_engine) -------------------------------------
    def prepare(self, executor: str) -> None:
        if executor not in EXECUTORS:  # the load names the choices
            return
        if self._runs_serially(executor):
            self._serial_engine()
        else:
            self._scheduler(executor)

    def load(self, model: str, onnx_path: str, executor: str, max_batch: int | None,
             lengths: tuple[int, ...] = (), instances: int | None = None) -> dict:
        if self._runs_serially(executor):
            described = self._serial_engine().load(model, onnx_path, executor, max_batch, lengths, instances)
            self._serial_models.add(model)
            self._shapes.pop(model, None)
        elif (instances or 1) > 1:  # the executor choice gives such a model to onnxruntime
            raise ValueError(f"{model}: REEF runs one instance of a model per vGPU, not {instances}")
        else:
            described = self._load_clients(model, onnx_path, executor, max_batch, lengths)
        return described

    def _load_clients(self, model: str, onnx_path: str, executor: str, max_batch: int | None,
                      lengths: tuple[int, ...]) -> dict:
        reef = self._scheduler(executor)
        shapes = ModelShapes(onnx_path)
        self._shapes[model] = shapes
        self._serial_models.discard(model)
        sizes = batch_sizes(max_batch)
        keys = [(batch, length) for batch in sizes for length in lengths or (None,)]
        memory = reef.executor.memory if EXECUTORS[executor].device_memory else None
        clients = []
        # a reload drops the model's earlier states; a virtual pool places its new ranges
        loading = self.residency.loading(model) if self.residency is not None else contextlib.nullcontext()
        try:
            with loading:
                for key in sorted(keys, key=lambda k: k[0] * (k[1] or 1), reverse=True):  # largest arena first
                    for priority in Priority:
                        with memory.sharing(model, priority) if memory else contextlib.nullcontext():
                            clients.append(self._add_client(model, shapes, priority, key))
                if self.residency is not None:
                    smallest = clients[-1].state  # the grouping is planned on the batch a switch most often serves
                    exec_s = measure_launches(reef.executor, smallest)
                    residency = self.residency.add(model, [c.state for c in clients], exec_s)
        except BaseException:
            if self.residency is not None:  # its memory went with the failed load: it must not run
                self._shapes.pop(model, None)
            raise
        for priority in Priority:
            if memory:
                self._turns[model, priority] = _Turns(self.reef.submit, self._handoff)
            else:
                self._turns.pop((model, priority), None)
        reef.prepare_padding()
        described = {"executor": executor, "preemptible": True, "scheduler": self.policy,
                     "batch_sizes": list(sizes)}
        if memory:
            described["device_memory"] = memory.held().get(model, {})
        if self.residency is not None:
            described["residency"] = residency
        return described

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
        for priority in Priority:
            self._turns.pop((model, priority), None)
        if self.residency is not None:
            self.residency.remove(model)

    def run(self, model: str, inputs: dict, priority: str = Priority.BE) -> Future:
        if model in self._serial_models:
            return self._serial_engine().run(model, inputs, priority)
        shapes = self._shapes.get(model)
        if shapes is None:
            raise KeyError(f"model {model!r} is not loaded on {self.info.id}")
        key = shapes.key(inputs)
        priority = Priority.of(priority)
        name = _client_name(model, priority, key)
        turns = self._turns.get((model, priority))
        if not self.reef.has_client(name):  # a shape not built at load (the worker counts it)
            memory = self.reef.executor.memory if turns else None
            with memory.sharing(model) if memory else contextlib.nullcontext():  # an arena of its own
                self._add_client(model, shapes, priority, key)
            self.reef.prepare_padding()
        done: Future = Future()
        if self.residency is not None and model in self.residency:
            done.add_done_callback(lambda _: self.residency.release(model))
            self.residency.admit(model, priority == Priority.RT, lambda: self._start(name, inputs, done, turns))
        else:
            self._start(name, inputs, done, turns)
        return done

    def _start(self, name: str, inputs: dict, done: Future, turns: "_Turns | None") -> None:
        """Submit a batch; residency may call this later, from the end of another batch."""
        if turns is not None:
            turns.run(name, inputs, done)
            return
        try:
            task = self.reef.submit(name, inputs)
        except Exception as exc:  # answered once, through the batch's future
            done.set_exception(exc)
            return
        task.add_done_callback(lambda t: _resolve(done, t))

    def close(self) -> None:
        if self._handoff_thread is not None:
            self._handoffs.put(None)
            self._handoff_thread.join()
        if self.reef is not None:
            self.reef.stop()
            self.reef.device.close()
        if self.residency is not None:
            self.residency.close()
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
            if self._residency_settings is not None:
                self.residency = self._residency_settings.gpu_residency(self.info.id, ex, self.info.memory_bytes)
            if self.residency is not None:  # graphs wait for their layer groups' events
                ex = GatedExecutor(ex)
            device, streams = CudaDevice(ex), 4
        else:
            # A stream is a CPU vGPU's unit of parallelism: one BLAS thread each, and as many BE
            # streams as the vGPU has cores.
            # an emulated device has the vGPU's memory
            memory = {"memory_bytes": self.info.memory_bytes} if EXECUTORS[executor].device_memory else {}
            ex = program_executor(executor)(blas_threads=1, **memory)
            if self._residency_settings is not None:
                self.residency = self._residency_settings.cpu_residency(self.info.id, ex)
            if self.residency is not None:  # launches wait for their layer group (docs/residency.md)
                ex = GatedExecutor(ex)
            device, streams = CpuDevice(ex), max(1, self.info.threads or len(self.info.cpus) or 1)
        self.reef = Reef(ex, device, self.policy, capacity=self.capacity, be_streams=streams).start()
        self._executor = executor
        return self.reef

    def _handoff(self, start) -> None:
        """Run `start()` on the engine's hand-off thread: a turn's next batch is submitted there,
        not on the scheduler thread whose completion callback ended the previous one."""
        if self._handoff_thread is None:
            self._handoff_thread = threading.Thread(target=self._handoff_loop, name="vgpu-turns", daemon=True)
            self._handoff_thread.start()
        self._handoffs.put(start)

    def _handoff_loop(self) -> None:
        while (start := self._handoffs.get()) is not None:
            start()

    def _add_client(self, model: str, shapes: ModelShapes, priority: str, key):
        name = _client_name(model, priority, key)
        return self.reef.add_client(name, shapes.program(key, name=name), priority)


def _client_name(model: str, priority: str, key) -> str:
    batch, length = key
    return f"{model}/{priority}/b{batch}" + (f"/l{length}" if length is not None else "")


class _Turns:
    """Batches of one (model, priority), whose programs share an arena, go to the scheduler one at
    a time in arrival order: the next is submitted (through `handoff`) once the previous is done."""

    def __init__(self, submit, handoff):
        self._submit, self._handoff = submit, handoff
        self._lock = threading.Lock()
        self._waiting: deque = deque()
        self._busy = False

    def run(self, name: str, inputs: dict, done: Future) -> None:
        with self._lock:
            if self._busy:
                self._waiting.append((name, inputs, done))
                return
            self._busy = True
        self._start(name, inputs, done)

    def _start(self, name: str, inputs: dict, done: Future) -> None:
        try:
            task = self._submit(name, inputs)
        except Exception as exc:  # answered once; the turn passes on
            done.set_exception(exc)
            self._next()
            return
        task.add_done_callback(lambda t: self._finished(done, t))

    def _finished(self, done: Future, task: Future) -> None:
        _resolve(done, task)
        self._next()

    def _next(self) -> None:
        with self._lock:
            if not self._waiting:
                self._busy = False
                return
            name, inputs, done = self._waiting.popleft()
        self._handoff(lambda: self._start(name, inputs, done))


def _resolve(done: Future, task: Future) -> None:
    """The worker's reply: outputs and the time from the batch's first kernel to its end."""
    try:
        result = task.result()
    except Exception as exc:
        done.set_exception(exc)
        return
    done.set_result((result.outputs, result.end_s - result.first_kernel_s))


def engine_for(policy: str, capacity: int = DEFAULT_CAPACITY, residency: ResidencySettings | None = None):
    """What to hand `WorkerPool(engine=...)`: picklable, so spawned workers can build it."""

    return functools.partial(ReefEngine, policy=policy, capacity=capacity, residency=residency)

