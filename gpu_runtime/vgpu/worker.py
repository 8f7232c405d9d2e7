"""The vGPU worker process: one per vGPU, the same code for MIG, green contexts, GPUs and CPU.

Messages (`messages.py`) come through a pipe from the pool; tensors through shared memory (the
front ends' slot arenas named in `RunRows`, stacked by `batches.BatchBuilder` with one copy at
most). Batches run on an engine (`SerialEngine`, or the
REEF scheduler's `scheduler.vgpu_engine`), several in flight; one reply thread stores outputs and
answers, so engine threads never wait on the pipe. Loads run on a loader thread of the lowest OS
priority and build and warm every shape the model will be asked for before they are answered (on
an executor that builds nothing per shape, such as onnxruntime, only the config's `model_warmup`
runs, as in Triton); a batch of any other shape is counted in `program_builds`, which a server
treats as a bug.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
from concurrent.futures import Future

import numpy as np

from gpu_runtime import green_context as vgpu_green_context
from gpu_runtime.executors.quiet import freeze_after_load
from gpu_runtime.priority import favour_real_time_threads, make_this_thread_background, relay_this_thread
from gpu_runtime.thread_names import name_this_thread
from gpu_runtime.vgpu import shm
from gpu_runtime.vgpu.batches import BatchBuilder, full_shape
from gpu_runtime.vgpu.messages import (
    Failed,
    Fatal,
    Load,
    Loaded,
    RanRows,
    Ready,
    RunRows,
    Stop,
    Unload,
    Unloaded,
)
from gpu_runtime.vgpu.sequence_state import SequenceStates, warm_up_inputs
from gpu_runtime.vgpu.serial_engine import SerialEngine


def worker_main(conn, info, engine=None) -> None:
    # Ctrl-C reaches the whole process group; the pool stops its workers itself (Stop), in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    name_this_thread(f"atoll-w-{info.id}")  # the process's name too: it receives the batches
    favour_real_time_threads()
    # The vGPU's environment (CUDA_VISIBLE_DEVICES=MIG-..., thread counts) must be in place before
    # any backend initialises CUDA or its thread pools, i.e. before any model is loaded.
    os.environ.update(info.env)
    try:
        if info.cpus and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, info.cpus)
        if info.green_context is not None:
            vgpu_green_context.activate(*info.green_context)
        runner = (engine or SerialEngine)(info)
    except Exception as exc:  # restarting would fail the same way: say why and stop
        conn.send(Fatal(f"{type(exc).__name__}: {exc}"))
        return
    worker = _Worker(conn, runner)
    try:
        conn.send(Ready(os.getpid()))
        worker.serve()
    except BrokenPipeError:  # the pool went away (a stop during start-up): nobody to serve
        pass
    finally:
        runner.close()
        worker.close()


class _Worker:
    def __init__(self, conn, runner):
        self.conn = conn
        self.runner = runner
        self.batches = BatchBuilder()
        self.specs: dict[str, object] = {}  # model -> BatchSpec, for models loaded with one
        self.sizes: dict[str, tuple[int, ...]] = {}  # model -> static batch sizes (empty: any)
        self.warm: dict[str, set] = {}  # model -> the shapes built at load
        self.arenas: dict[str, set[str]] = {}  # model -> the slot arenas its rows came from (mapped)
        self.program_builds = 0
        self.sequences = SequenceStates()  # stateful models' implicit states, per sequence
        self.outbox: queue.SimpleQueue = queue.SimpleQueue()  # callables making the next reply
        self.replier = threading.Thread(target=self._reply_loop, name="hop-reply", daemon=True)
        self.replier.start()
        self.loads: queue.SimpleQueue = queue.SimpleQueue()  # Load and Unload messages, in order
        self.parked: dict[str, list] = {}  # model being loaded -> batches that wait for it
        self.lock = threading.Lock()  # the receiver and the loader both hand batches to the engine
        self.loader = threading.Thread(target=self._load_loop, name="vgpu-load", daemon=True)
        self.loader.start()

    def serve(self) -> None:
        relay_this_thread()  # threads started from here on (an executor's) are ordinary
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):  # the pool is gone: nothing left to serve
                return
            match message:
                case Stop():
                    return
                case Load() | Unload():
                    try:
                        if isinstance(message, Load):
                            self.runner.prepare(message.executor)  # its threads are not the loader's
                    except Exception as exc:  # the load fails with it; the worker keeps serving
                        self._reply(lambda m=message, e=exc: Failed(m.req, type(e).__name__, str(e)))
                        continue
                    with self.lock:
                        self.parked.setdefault(message.model, [])
                    self.loads.put(message)
                case _:
                    with self.lock:
                        parked = self.parked.get(getattr(message, "model", None))
                        if parked is not None:
                            parked.append(message)
                        else:
                            self._handle(message)

    def _handle(self, message) -> None:
        try:
            self._start(message)
        except Exception as exc:  # reported to the caller's future; the worker keeps serving
            self._reply(lambda m=message, e=exc: Failed(m.req, type(e).__name__, str(e)))

    def _load_loop(self) -> None:
        name_this_thread()
        make_this_thread_background()
        while (message := self.loads.get()) is not None:
            try:
                if isinstance(message, Load):
                    reply = Loaded(message.req, self._load(message))
                    freeze_after_load()  # what the load and warm-up built is out of later collections' walks
                else:
                    self._unload(message.model)
                    reply = Unloaded(message.req)
            except Exception as exc:
                reply = Failed(message.req, type(exc).__name__, str(exc))
            self._reply(lambda r=reply: r)
            with self.lock:
                for waiting in self.parked.pop(message.model, []):
                    self._handle(waiting)

    def _start(self, message) -> None:
        match message:
            case RunRows():
                spec = self.specs.get(message.model)
                if spec is None:
                    raise KeyError(f"model {message.model!r} was not loaded for rows (no BatchSpec)")
                self.arenas.setdefault(message.model, set()).update(row.arena for row in message.rows)
                inputs, release = self.batches.build(spec, message.rows, message.length, self.sizes[message.model])
                self._note_shape(message.model, inputs)
                if spec.sequence is not None:
                    batch = next(iter(inputs.values())).shape[0] if spec.batched else None
                    inputs = {**inputs, **self.sequences.inputs(message.model, spec.sequence, message.sequences,
                                                                batch, message.released)}  # fmt: skip
                future = self.runner.run(message.model, inputs, message.priority)
                future.add_done_callback(lambda _: release())
                future.add_done_callback(lambda f: self._reply(lambda: self._ran_rows(f, message, spec)))
            case _:
                raise ValueError(f"unknown message {type(message).__name__}")

    def _load(self, message: Load) -> dict:
        description = self.runner.load(message.model, message.onnx_path, message.executor,
                                       message.max_batch, message.lengths, message.instances)
        spec = message.batch
        if spec is None:
            return description
        sizes = tuple(description.get("batch_sizes") or ())
        out_row_bytes = 0
        warm = set()
        for inputs in _warm_up_inputs(spec, sizes, message.lengths):
            if spec.sequence is not None:
                batch = next(iter(inputs.values())).shape[0] if spec.batched else None
                inputs = {**inputs, **warm_up_inputs(spec.sequence, batch)}
            outputs, _ = self.runner.warm_up(message.model, inputs)
            states = {s.output_name for s in spec.sequence.states} - set(spec.output_dims) if spec.sequence else set()
            row = {k: v[0] if spec.batched else v for k, v in outputs.items() if k not in states}
            out_row_bytes = max(out_row_bytes, shm.plan({k: np.asarray(v) for k, v in row.items()})[1])
            warm.add(_shape_key(inputs[spec.fields[0].name].shape, sizes))
        self.specs[message.model], self.sizes[message.model] = spec, sizes
        self.warm[message.model] = warm
        return {**description, "batch_sizes": list(sizes), "out_row_bytes": out_row_bytes}

    def _unload(self, model: str) -> None:
        self.runner.unload(model)
        self.sequences.forget(model)
        for table in (self.specs, self.sizes, self.warm):
            table.pop(model, None)
        with self.lock:  # batches are started under it; none of this model's is (it is parked)
            arenas = self.arenas.pop(model, ())
        self.batches.forget(arenas)

    def _note_shape(self, model: str, inputs: dict) -> None:
        """Count a batch whose shape was not built at load (see the module docstring)."""
        warm = self.warm.get(model)
        spec = self.specs.get(model)
        if warm is None or spec.fields[0].name not in inputs or (not spec.padded and not self.sizes[model]):
            return  # (onnxruntime and the like build nothing for a new shape)
        key = _shape_key(inputs[spec.fields[0].name].shape, self.sizes[model])
        if key not in warm:
            warm.add(key)
            self.program_builds += 1

    def _ran_rows(self, future: Future, message: RunRows, spec) -> RanRows | Failed:
        try:
            outputs, seconds = future.result()
            if spec.sequence is not None:
                outputs = self.sequences.keep(message.model, spec.sequence, message.sequences, outputs, spec.batched,
                                              spec.output_dims)  # fmt: skip
            layouts = self.batches.scatter(spec, message.rows, outputs, message.length)
            return RanRows(message.req, layouts, seconds, self.program_builds)
        except Exception as exc:
            return Failed(message.req, type(exc).__name__, str(exc))

    def _reply(self, make) -> None:
        self.outbox.put(make)

    def _reply_loop(self) -> None:
        name_this_thread()
        relay_this_thread()
        while (make := self.outbox.get()) is not None:
            try:
                self.conn.send(make())
            except OSError:  # the pool is gone
                return

    def close(self) -> None:
        self.loads.put(None)
        self.loader.join(10)
        self.outbox.put(None)
        self.replier.join(10)
        self.batches.close()


def _warm_up_inputs(spec, sizes: tuple[int, ...], lengths: tuple[int, ...] = ()):
    """What runs at load, on zeros (empty strings): for a padded model every batch size (`sizes`,
    else 1) at every length it pads to (`lengths`); for any other, on an executor that builds a
    program per shape (`sizes` given; the executor choice gives it models of fixed shapes only),
    every batch size. Then the config's `model_warmup` samples, each as often as it says, as Triton
    runs them. Nothing else: no shape the model did not ask for is assumed valid (a -1 at its bound
    may not be)."""
    for length in (lengths or (None,)) if spec.padded else ((None,) if sizes else ()):
        for batch in (sizes or (1,)) if spec.batched else (None,):
            lead = (batch,) if batch else ()
            yield {f.name: np.full(lead + full_shape(f.dims, length), "" if f.dtype == object else 0, f.dtype)
                   for f in spec.fields}  # fmt: skip
    rng = np.random.default_rng(0)
    dtypes = {f.name: f.dtype for f in spec.fields}
    for batch, count, inputs in spec.warmups:
        lead = (batch,) if spec.batched else ()
        for _ in range(count):
            yield {name: _sample(rng, lead + dims, dtypes[name], kind) for name, dims, kind in inputs}


def _sample(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, kind: str) -> np.ndarray:
    """A warm-up input: zeros (empty strings), or random values of its dtype (digit strings)."""
    if kind == "zero_data":
        return np.full(shape, "" if dtype == object else 0, dtype)
    if dtype == object:
        return rng.integers(0, 10**6, shape).astype(str).astype(object)
    if dtype.kind == "f":
        return rng.random(shape).astype(dtype)
    return rng.integers(0, 2 if dtype == bool else 100, shape).astype(dtype)


def _shape_key(shape: tuple[int, ...], sizes: tuple[int, ...]) -> tuple:
    """What a built program is keyed by: the whole shape for static shapes, else all but the batch."""
    return tuple(shape) if sizes else tuple(shape[1:])
