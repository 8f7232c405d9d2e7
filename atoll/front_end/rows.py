"""A front end's requests made into rows in shared-memory slots, sent to the dispatcher, answered.

Each row of a request becomes a slot row, one layout for every model (`row_fields`: each input at
its offset; a media model's row is its one input): JPEG/WAV files preprocessed on the lanes
(`lanes.Lanes`: real-time work on its own thread) straight into the slot, ready tensors copied in
after one check (`check_tensor`).
The rows go to the dispatcher as one `Submit` (slot references, never tensors); the `Done` that
comes back says where each row's outputs are. A slot is given back once its outputs are read, or,
for a request that gave up, when its `Done` arrives (the dispatcher is told, `Cancel`). A front end
replacing one that died holds its predecessor's slots in flight (`FrontEndSetup.held`) until their
`Done`. Preprocessing runs here, not in processes of its own: that saves a hand-off and, on the CPU
path, a copy per request (docs/data-plane.md). Models come and go: `add_model`, `retire_model`.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from batching.sequence import no_correlation_id, not_one_row
from fpga_host import cpu_backend
from fpga_host.preprocessor import Preprocessor
from gpu_runtime.priority import Priority
from gpu_runtime.vgpu import shm
from gpu_runtime.vgpu.messages import Row, RowInput, RowSequence
from gpu_runtime.vgpu.slots import SlotArena, pack_bytes, row_layout

from atoll.config import Config
from atoll.front_end.colocated import LANE_BATCH_MAX, LocalModels
from atoll.front_end.lanes import Batched, Lanes, core_share
from atoll.front_end.limits import MediaLimits
from atoll.front_end.media import pad_stack, read_wav
from atoll.front_end.slots import SlotAllocator
from atoll.kserve.datatypes import DTYPES
from atoll.kserve.errors import ApiError, ErrorCode
from atoll.kserve.protocol import InferRequest, ProtocolError, Tensor, described
from atoll.repository.specs import ModelSpec, TensorSpec
from atoll.wire.channel import Cancel, Done, Failure, Outbox, Submit
from atoll.wire.responses import Response


class RowFailed(RuntimeError):
    """The dispatcher could not run a row (see `channel.Failure`)."""

    def __init__(self, failure: Failure, reason: str):
        super().__init__(reason)
        self.failure = failure


def priority_of(spec: ModelSpec, parameters: dict) -> Priority:
    """RT or BE from a request's Triton `priority` parameter: level 1 (the highest) is real-time,
    any other level best-effort, and 0 or none takes the model's `default_priority_level`."""
    level = parameters.get("priority", 0)
    if isinstance(level, bool) or not isinstance(level, int) or level < 0:
        raise ProtocolError(f"parameter 'priority' must be a non-negative integer, got {described(level)}")
    return Priority.RT if (level or spec.default_priority_level) == 1 else Priority.BE


def queue_parameters(parameters: dict) -> tuple[int, int]:
    """A request's Triton `priority` level and `timeout` (microseconds), 0 where it sets none: the
    model's queue policies read them (`batching.queue_policy`)."""
    out = []
    for key in ("priority", "timeout"):
        value = parameters.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ProtocolError(f"parameter {key!r} must be a non-negative integer, got {described(value)}")
        out.append(value)
    return out[0], out[1]


def sequence_of(spec: ModelSpec, parameters: dict, rows: int) -> RowSequence | None:
    """A stateful model's request: its Triton `sequence_id` (an unsigned integer or a string; 0 and
    "" mean none), `sequence_start` and `sequence_end`; None for other models. Refused with Triton's
    words where it names no sequence or holds more than one row."""
    if spec.sequence is None:
        return None
    corrid = parameters.get("sequence_id", 0)
    flags = [parameters.get(key, False) for key in ("sequence_start", "sequence_end")]
    unsigned = isinstance(corrid, int) and not isinstance(corrid, bool) and 0 <= corrid < 2**64
    if not (unsigned or isinstance(corrid, str)):
        raise ProtocolError(f"parameter 'sequence_id' must be an unsigned 64-bit integer or a string, "
                            f"got {described(corrid)}")  # fmt: skip
    if not all(isinstance(flag, bool) for flag in flags):
        raise ProtocolError("parameters 'sequence_start' and 'sequence_end' must be true or false")
    if corrid in (0, ""):
        raise ProtocolError(no_correlation_id(spec.name))
    if rows != 1:
        raise ProtocolError(not_one_row(spec.name))
    corrid_type = next((c.datatype for c in spec.sequence.controls if c.kind == "corrid"), None)
    if corrid_type is not None and isinstance(corrid, str) != (corrid_type == "BYTES"):
        want = "a string" if corrid_type == "BYTES" else "an unsigned integer"
        raise ProtocolError(f"model '{spec.name}' takes {want} sequence_id (its CONTROL_SEQUENCE_CORRID is "
                            f"{corrid_type.replace('BYTES', 'STRING')})")  # fmt: skip
    return RowSequence(corrid, *flags)


@dataclass(frozen=True)
class FrontEndSetup:
    """Everything a front-end process needs, picklable for `spawn`."""

    index: int
    count: int  # front ends in all (DPU compute units are shared out among them)
    config: Config
    models: dict[str, ModelSpec]  # by served version (`ModelSpec.key`)
    arenas: dict[str, str]  # served version -> its slot arena for this front end
    port: int  # the shared HTTP port
    grpc_port: int | None  # the shared gRPC port (None: no gRPC)
    gpu_uuids: tuple[str, ...]  # the server's GPU vGPUs (GPU metrics, CUDA shared memory)
    held: frozenset[tuple[str, int]] = frozenset()  # (arena, slot) a dead predecessor left in flight
    regions: tuple = ()  # shared-memory regions registered before it started (shm_registry.Register)
    colocated: frozenset[str] = frozenset()  # models whose best-effort requests it runs itself (colocated.py)
    local_sock: socket.socket | None = None  # the HTTP port's local twin, shared by the front ends (local_socket.py)


class FrontEnd:
    """The protocol-independent core: `infer(spec, request)` for the HTTP and gRPC servers."""

    def __init__(self, setup: FrontEndSetup, outbox: Outbox, metrics):
        c = setup.config
        p = c.preprocessing
        self.metrics = metrics
        self.limits = MediaLimits.of(p)
        self.models = dict(setup.models)
        self.outbox = outbox
        self.pre = Preprocessor(
            p.backend, cpu_workers=0, image_cus=p.image_cus, audio_mel_cus=p.audio_mel_cus,
            audio_norm_cus=p.audio_norm_cus, manifest=p.manifest, cu_timeout_s=p.cu_timeout_ms / 1000,
            max_image_dim=p.max_image_dim, max_jpeg_scans=p.max_jpeg_scans, resize_short=p.resize_short,
            crop=p.crop, fp16=p.fp16, max_audio_seconds=p.max_audio_seconds, cu_share=(setup.index, setup.count))  # fmt: skip
        # the first requests must not pay for librosa's caches: built now if an audio model is
        # served, else when one is added (`warm_for`)
        self.audio_warm = any(spec.preprocess == "audio" for spec in self.models.values())
        cpu_backend.init_worker(audio_too=self.audio_warm)
        # A lane thread per DPU compute unit (they wait on it), else the configured CPU threads,
        # each kept on a core of this front end's share (measured: docs/data-plane.md).
        cores = os.sched_getaffinity(0)
        threads = p.cpu_threads or max(1, len(cores) // setup.count)
        wait_s = c.server.colocate_wait_us / 1e6
        if self.pre.backend == "cpu":
            self.lanes = Lanes(threads, core_share(cores, setup.index, setup.count) if p.pin_threads else (),
                               batch_wait_s=wait_s)
        else:
            self.lanes = Lanes(max(threads, self.pre.parallelism - 1), batch_wait_s=wait_s)
        self.local = LocalModels(metrics)
        for key in setup.colocated & self.models.keys():
            self.local.add(key, LocalModels.build(self.models[key]))
        self.slots: dict[str, SlotAllocator] = {}
        self._by_arena: dict[str, SlotAllocator] = {}
        for name, arena in setup.arenas.items():
            self._attach(self.models[name], arena)
        self._waiting: dict[tuple[str, int], asyncio.Future] = {}
        self._streams: dict[tuple[str, int], Callable] = {}  # a decoupled model's request -> its on_response
        self._active: Counter[str] = Counter()  # model -> requests inside `infer`
        self._held = {key for key in setup.held if key[0] in self._by_arena}
        for arena, index in self._held:
            self._by_arena[arena].hold(index)

    def _attach(self, spec: ModelSpec, arena: str) -> None:
        # slots kept for real-time rows: one real-time request of the model always fits
        slots = self.slots[spec.key] = SlotAllocator(SlotArena.attach(arena), max(spec.max_batch_size, 1))
        self._by_arena[slots.arena.name] = slots

    async def warm_for(self, spec: ModelSpec) -> None:
        """Before `spec` is added: librosa's caches if it is the first audio model here (off the loop)."""
        if spec.preprocess == "audio" and not self.audio_warm:
            await asyncio.to_thread(cpu_backend.warm_audio)
            self.audio_warm = True

    def add_model(self, spec: ModelSpec, arena: str | None, session=None) -> None:
        """`session`: `LocalModels.build(spec)`, for a model it runs itself (`AddModel.colocated`)."""
        if arena is not None:  # an ensemble has none: its steps' models make its rows
            self._attach(spec, arena)
        if session is not None:
            self.local.add(spec.key, session)
        self.models[spec.key] = spec

    async def retire_model(self, name: str, timeout_s: float) -> None:
        """Admit no more requests of `name` (a served version, `ModelSpec.key`), wait (up to
        `timeout_s`) until those inside are answered and every slot of it is back, then let its
        slots go. A model this front end never added (a load taken back before it got here) has
        nothing to retire."""
        self.models.pop(name, None)
        slots = self.slots.get(name)
        if slots is None:
            return
        deadline = time.monotonic() + timeout_s
        while self._active[name] or slots.free < slots.arena.count:
            if time.monotonic() > deadline:
                raise ApiError(ErrorCode.INTERNAL, f"model {name!r} still has requests in flight after "
                                                   f"{timeout_s:g} s")  # fmt: skip
            await asyncio.sleep(0.01)
        del self._active[name], self.slots[name], self._by_arena[slots.arena.name]
        self.local.remove(name)
        slots.arena.close()

    def close(self) -> None:
        self.lanes.close()
        self.pre.close()
        for slots in self.slots.values():
            slots.arena.close()

    # -- requests -----------------------------------------------------------------------------------

    async def infer(self, spec: ModelSpec, request: InferRequest, priority: Priority,
                    deadline: float, on_response: Callable | None = None) -> dict[str, np.ndarray]:
        """The request's outputs by name; `priority` as `priority_of` tells it, `deadline` on the
        `time.monotonic()` clock (no answer is waited for after it). A decoupled model's request
        is answered by `on_response(outputs or error message)` per response, and returns {}."""
        if self.models.get(spec.key) is not spec:  # retired (or replaced) since the caller looked
            raise ApiError(ErrorCode.NOT_FOUND, f"Request for unknown model: '{spec.name}' is not found")
        self._active[spec.key] += 1
        try:
            return await self._infer(spec, request, priority, deadline, on_response)
        finally:
            self._active[spec.key] -= 1

    async def _infer(self, spec: ModelSpec, request: InferRequest, priority: Priority,
                     deadline: float, on_response: Callable | None) -> dict[str, np.ndarray]:
        queue = queue_parameters(request.parameters)
        make, sources = self._sources(spec, request)
        sequence = sequence_of(spec, request.parameters, len(sources))
        if priority == Priority.BE and len(sources) == 1 and spec.key in self.local:
            return await self._infer_here(spec, make, sources[0], deadline)
        if make is not None:  # the request's files, together
            self.limits.check(spec.preprocess, sources)
        slots = self.slots[spec.key]
        try:
            indices = await slots.acquire(len(sources), priority)
        except ValueError as exc:
            raise ProtocolError(str(exc)) from None
        counters = self.metrics.of(spec.name, spec.version)
        start = time.perf_counter()
        rows = await self._make_rows(spec, priority, make, sources, slots, indices)
        counters.compute_input_us.inc((time.perf_counter() - start) * 1e6)
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in rows]
        for row, future in zip(rows, futures):
            self._waiting[(row.arena, row.index)] = future
        if on_response is not None:
            self._streams[(rows[0].arena, rows[0].index)] = on_response
        # a real-time request's rows go at once; best-effort ones with the loop round's others
        self.outbox.send(Submit(spec.key, priority, deadline, rows, *queue, sequence), priority == Priority.RT)
        try:
            layouts = await _settled(futures, slots, indices)
        except BaseException:  # it gave up or a row failed: its rows still queued are not wanted
            dropped = tuple(row for row, future in zip(rows, futures) if future.cancelled())
            if dropped:
                self.outbox.send(Cancel(dropped))
            raise
        finally:
            self._streams.pop((rows[0].arena, rows[0].index), None)
        start = time.perf_counter()
        try:
            return {} if on_response is not None else self._outputs(spec, slots, indices, layouts)
        finally:
            slots.release(indices)
            counters.compute_output_us.inc((time.perf_counter() - start) * 1e6)

    async def _infer_here(self, spec: ModelSpec, make, source, deadline: float) -> dict[str, np.ndarray]:
        """A model this front end runs itself (`colocated.py`): the row made and run on a lane,
        batched with the rows of its model and shapes that wait there (`lanes.Batched`)."""
        shapes = None if make is not None else tuple(a.shape for a in source)  # a file: the model's one shape
        job = Batched(self._made_and_run, (spec.key, shapes), min(spec.max_batch_size, LANE_BATCH_MAX))
        return await self.lanes.run(Priority.BE, job, spec, make, source, deadline, time.perf_counter())

    def _made_and_run(self, items: list[tuple]) -> list:
        """On a lane: each row made (a file preprocessed straight into its row of the batch), the
        rows whose deadline has not passed run as one batch, as the dispatcher drops the others;
        each row's outputs (with the batch dimension), or its error. Each row's wait for the lane
        is its queue time."""
        spec, make = items[0][0], items[0][1]
        start = time.perf_counter()
        self.metrics.of(spec.name, spec.version).queue_us.inc(sum(start - i[4] for i in items) * 1e6)
        results: list = [None] * len(items)
        if make is not None:
            first = spec.inputs[0]
            rows = np.empty((len(items), *first.model_dims), DTYPES[first.datatype])
            for k, item in enumerate(items):
                try:  # its header checked here, off the event loop (docs/data-plane.md)
                    self.limits.check(spec.preprocess, [item[2]])
                    make(spec, item[2], rows[k].reshape(-1))
                except Exception as exc:  # this file alone fails (e.g. a corrupt JPEG)
                    results[k] = exc
            inputs = [rows]
        else:
            inputs = [parts[0][np.newaxis] if len(parts) == 1 else np.stack(parts)
                      for parts in zip(*(item[2] for item in items))]  # fmt: skip
        self.metrics.of(spec.name, spec.version).compute_input_us.inc((time.perf_counter() - start) * 1e6)
        now = time.monotonic()
        for k, item in enumerate(items):
            if results[k] is None and now >= item[3]:
                results[k] = RowFailed(Failure.EXPIRED, "its deadline passed before it was run")
        run = [k for k, result in enumerate(results) if result is None]
        if not run:
            return results
        try:
            outputs = self.local.run(spec, inputs if len(run) == len(items) else [a[run] for a in inputs])
        except Exception as exc:  # the run failed, as a batch fails on its vGPU: every row of it
            failed = RowFailed(Failure.BACKEND, str(exc) or type(exc).__name__)
            return [failed if k in run else result for k, result in enumerate(results)]
        for j, k in enumerate(run):
            results[k] = {out.name: _as_configured(out, outputs[out.name][j])[np.newaxis] for out in spec.outputs}
        return results

    def _sources(self, spec: ModelSpec, request: InferRequest):
        """How to make each row (a function for the lanes, or None to copy its tensors in here) and
        what from: each file (its header not yet checked: `self.limits`), or each row's part of every
        input (a media model's one input)."""
        by_name = {t.name: t for t in request.inputs}
        limit = max(spec.max_batch_size, 1)
        if spec.preprocess != "none" and spec.raw_input in by_name and spec.inputs[0].name in by_name:
            raise ProtocolError(f"inputs {spec.raw_input!r} and {spec.inputs[0].name!r} are alternatives "
                                f"(a {spec.preprocess} file or its ready tensor): send one")  # fmt: skip
        if spec.preprocess != "none" and spec.raw_input in by_name:
            raw = by_name[spec.raw_input]
            if raw.datatype != "BYTES":
                raise ProtocolError(f"input {raw.name!r} must be BYTES (a {spec.preprocess} file)")
            files = list(raw.data.reshape(-1))
            if not 0 < len(files) <= limit:
                raise ProtocolError(f"{len(files)} files in one request; model {spec.name!r} takes 1 to {limit}")
            return (self._preprocess_image if spec.preprocess == "image" else self._preprocess_audio), files
        if spec.padded and spec.inputs[0].name not in by_name:
            wanted = [spec.raw_input, spec.inputs[0].name]
            raise ProtocolError(f"model {spec.name!r} needs input {' or '.join(wanted)!r}")
        return None, _split_request(spec, by_name)

    async def _make_rows(self, spec, priority, make, sources, slots, indices) -> tuple[Row, ...]:
        arena = slots.arena
        if make is None:
            fields = row_fields(spec, arena)
            try:
                return tuple(self._copy_fields(fields, arena, index, row) for index, row in zip(indices, sources))
            except BaseException:
                slots.release(indices)
                raise
        futures = [self.lanes.run(priority, make, spec, data, self._slot(arena, index),
                                  abandoned=functools.partial(slots.release, [index]))
                   for data, index in zip(sources, indices)]  # fmt: skip
        made = await _settled(futures, slots, indices)
        return tuple(Row(arena.name, index, array.shape) for index, array in zip(indices, made))

    @staticmethod
    def _copy_fields(fields, arena: SlotArena, index: int, row: list[np.ndarray]) -> Row:
        """A row holding every input of the model, each at its offset (`row_fields`)."""
        for field, array in zip(fields, row):
            if field.dtype != object:
                if array.nbytes > field.room:
                    raise ProtocolError(f"an input row of {array.nbytes} bytes exceeds the largest this model "
                                        f"takes ({field.room})")  # fmt: skip
                arena.input(index, array.shape, field.dtype, field.offset)[...] = array
                continue
            try:
                pack_bytes(array.reshape(-1), arena.input(index, (field.room,), np.uint8, field.offset))
            except ValueError as exc:
                raise ProtocolError(f"input {field.name!r}: {exc} (its config's parameter atoll.max_bytes)") from None
        return Row(arena.name, index, row[0].shape, tuple(a.shape for a in row[1:]))

    def _preprocess_image(self, spec, data: bytes, out: np.ndarray) -> np.ndarray:
        """Into `out`, a float32 buffer (a slot, or a row of a batch): the tensor, a view of it."""
        # checked: every file of the request passed `self.limits` (the preprocessor's limits)
        return self._preprocessed(spec, self.pre.image_now(bytes(data), out=out, checked=True))

    def _preprocess_audio(self, spec, data: bytes, out: np.ndarray) -> np.ndarray:
        pcm, rate = read_wav(bytes(data), self.limits.max_clip_seconds)
        return self._preprocessed(spec, self.pre.submit_audio(pcm, rate, out=out).result())

    @staticmethod
    def _slot(arena: SlotArena, index: int) -> np.ndarray:
        return arena.input(index, (arena.in_stride // 4,))

    def _preprocessed(self, spec, result) -> np.ndarray:
        """The preprocessing's `Result` (a DPU run's, or the CPU path's), accounted: the tensor, in
        the buffer it was given."""
        self.metrics.child(self.metrics.preprocess_us, spec.name, result.backend).inc(result.timings["total_ms"] * 1e3)
        return result.array

    def _outputs(self, spec: ModelSpec, slots: SlotAllocator, indices, layouts) -> dict[str, np.ndarray]:
        rows = [shm.views(slots.arena.output(index), layout) for index, layout in zip(indices, layouts)]
        if spec.max_batch_size == 0:  # the one row's outputs are the whole outputs, as the model made them
            return {out.name: _as_configured(out, np.array(rows[0][out.name])) for out in spec.outputs}
        return {out.name: pad_stack([_as_configured(out, row[out.name]) for row in rows]) for out in spec.outputs}

    # -- the dispatcher's answers -------------------------------------------------------------------

    def on_response(self, message: Response) -> None:
        """A decoupled model's response: its tensors read out of their segment, which goes."""
        outputs = {}
        if message.segment is not None:
            outputs = shm.read(message.segment, message.layout)
            shm.unlink(message.segment)
        on_response = self._streams.get((message.row.arena, message.row.index))
        if on_response is not None and (outputs or message.error):
            on_response(message.error or outputs)

    def on_done(self, message: Done) -> None:
        for k, row in enumerate(message.rows):
            key = (row.arena, row.index)
            future = self._waiting.pop(key, None)
            if future is None:
                if key in self._held:  # the predecessor's row: its slot is written no more
                    self._held.discard(key)
                    self._by_arena[row.arena].release([row.index])
                continue
            if future.cancelled():  # its request gave up: the slot is free only now
                self._by_arena[row.arena].release([row.index])
            elif message.failure is not None:
                future.set_exception(RowFailed(message.failure, message.reason))
            else:
                future.set_result(message.layouts[k])


def row_fields(spec: ModelSpec, arena: SlotArena) -> tuple[RowInput, ...]:
    """Every input of the model's rows, at its offset: one row layout for every model (a media
    model's one input fills its slot, as long as the longest length it is padded to)."""
    if spec.padded:
        first = spec.inputs[0]
        return (RowInput(first.name, tuple(first.dims), DTYPES[first.datatype], 0, arena.in_stride),)
    return row_layout(spec.row_fields(), spec.dim_bound, spec.bytes_room)[0]


def check_tensor(spec: ModelSpec, want: TensorSpec, datatype: str, shape: tuple[int, ...]) -> None:
    """An input of a model: its datatype, and its shape against the config's dims (after 1 to max_batch_size rows where the model batches; a -1 up to its bound)."""
    if datatype != want.datatype:
        raise ProtocolError(f"input {want.name!r}: expected {want.datatype}, got {datatype}")
    batched = spec.max_batch_size > 0
    dims = tuple(shape[1:] if batched else shape)
    if want.reshape == () and dims == ():  # a scalar sent as the model takes it, not as [1]
        dims = (1,)
    if len(dims) != len(want.dims) or any(d != -1 and d != s for d, s in zip(want.dims, dims)):
        expected = ", ".join(map(str, ([-1] if batched else []) + list(want.dims)))
        raise ProtocolError(f"input {want.name!r}: shape {list(shape)} does not match [{expected}]")
    if batched and not 0 < shape[0] <= spec.max_batch_size:
        raise ProtocolError(f"batch of {shape[0]} rows; model {spec.name!r} takes 1 to {spec.max_batch_size}")
    # (a padded model's -1 is bounded by its slot, the longest length it is padded to: `_copy_fields`)
    if not spec.padded and any(d == -1 and s > spec.dim_bound for d, s in zip(want.dims, dims)):
        raise ProtocolError(f"input {want.name!r}: shape {list(shape)} exceeds this model's bound of "
                            f"{spec.dim_bound} in a -1 dimension (its config's parameter atoll.max_dim)")  # fmt: skip


def _split_request(spec: ModelSpec, by_name: dict[str, Tensor]) -> list[list[np.ndarray]]:
    """A request's rows, each a list of every input's
    part in the model's order (the whole tensors for a model without batching). Each input must be
    sent in its datatype, with the config's dims (a -1 up to the model's bound), and every input
    with as many rows."""
    missing = [t.name for t in spec.inputs if t.name not in by_name]
    if missing:
        raise ProtocolError(f"model {spec.name!r} needs input(s) {', '.join(missing)}")
    unknown = [name for name in by_name if name not in {t.name for t in spec.inputs}]
    if unknown:
        raise ProtocolError(f"model {spec.name!r} has no input(s) {', '.join(unknown)}")
    parts = []
    for want in spec.inputs:
        tensor = by_name[want.name]
        check_tensor(spec, want, tensor.datatype, tensor.data.shape)
        data = tensor.data
        if want.reshape is not None:  # the graph's shape (Triton's `reshape`): a view, nothing copied
            data = data.reshape(data.shape[:1] + want.reshape if spec.max_batch_size > 0 else want.reshape)
        parts.append(list(data) if spec.max_batch_size > 0 else [data])
    if len({len(p) for p in parts}) > 1:
        raise ProtocolError(f"inputs of model {spec.name!r} must have as many rows: "
                            f"{', '.join(f'{t.name} {len(p)}' for t, p in zip(spec.inputs, parts))}")  # fmt: skip
    return [list(row) for row in zip(*parts)]


def _as_configured(out: TensorSpec, row: np.ndarray) -> np.ndarray:
    """A row's output as the config gives it: the model's shape reshaped to `dims` where the
    config reshapes it (a scalar as [1])."""
    return row if out.reshape is None else row.reshape(out.dims)


async def _settled(futures: list[asyncio.Future], slots: SlotAllocator, indices: list[int]) -> list:
    """The futures' results, one per slot. If any fails, or the request gives up, each slot whose
    future has finished is given back here; the others are cancelled, and whoever finishes them
    (a lane, `on_done`) gives their slot back when nothing writes into it any more."""
    try:
        return [await futures[0]] if len(futures) == 1 else await asyncio.gather(*futures)
    except BaseException:
        for future, index in zip(futures, indices):
            if future.done() and not future.cancelled():
                slots.release([index])
            else:
                future.cancel()
        raise
