"""Request pipeline: preprocess each input on the DPU, batch it, run the batch on a vGPU.

One asyncio task drives the batcher (a pure policy on the loop's clock): it polls on every arrival
and completion and otherwise sleeps until the batcher's next deadline. Each dispatched batch is run
by the vGPU pool; its rows are handed back to the waiting requests.

Real-time requests (Triton priority 1, see `priority_class`) skip the batcher: their rows go out at
once as one batch (`batching.RtPlacement`) and run as RT work on the vGPU, which preempts the BE
batches there when its engine can (`scheduler.vgpu_engine`) and otherwise runs before the queued ones.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from atoll.protocol import InferRequest, ProtocolError, Tensor
from atoll.repository import ModelSpec

log = logging.getLogger("atoll.pipeline")
FRAME_SECONDS = 0.01  # one mel frame = hop 160 at 16 kHz: the audio length unit of the batcher


class MediaError(ValueError):
    """Unreadable or unsupported media in a request (answered with HTTP 400)."""


@dataclass
class Waiting:
    """One input row waiting for its batch."""

    tensor: np.ndarray
    future: asyncio.Future
    enqueued: float
    timings: dict[str, float] = field(default_factory=dict)


def read_wav(data: bytes) -> tuple[np.ndarray, int]:
    """WAV/FLAC bytes -> (mono float32 PCM, sample rate); stereo is averaged to mono."""
    import soundfile

    try:
        pcm, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as exc:  # soundfile raises several types for bad files
        raise MediaError(f"not a readable audio file: {exc}") from None
    return pcm.mean(axis=1, dtype=np.float32), int(rate)


def priority_class(spec: ModelSpec, request: InferRequest) -> str:
    """"rt" or "be" from the request's Triton `priority` parameter: level 1 (the highest) is
    real-time, any other level best-effort, and 0 or none takes the model's
    `default_priority_level`."""
    level = request.parameters.get("priority", 0)
    if isinstance(level, bool) or not isinstance(level, int) or level < 0:
        raise ProtocolError(f"parameter 'priority' must be a non-negative integer, got {level!r}")
    return "rt" if (level or spec.default_priority_level) == 1 else "be"


def pad_stack(arrays: list[np.ndarray]) -> np.ndarray:
    """Stack along a new batch axis, zero-padding the last axis to the longest (audio frames)."""
    longest = max(a.shape[-1] for a in arrays)
    if all(a.shape[-1] == longest for a in arrays):
        return np.stack(arrays)
    out = np.zeros((len(arrays), *arrays[0].shape[:-1], longest), dtype=arrays[0].dtype)
    for i, a in enumerate(arrays):
        out[i, ..., : a.shape[-1]] = a
    return out


class Pipeline:
    def __init__(self, models: dict[str, ModelSpec], preprocessor, pool, batcher, metrics,
                 latency=None, vgpu_kinds: dict[str, str] | None = None):
        self.models = models
        self.latency = latency  # LatencyModel fed with every batch's measured run time
        self.vgpu_kinds = vgpu_kinds or {}
        self.pre = preprocessor
        self.pool = pool
        self.batcher = batcher
        self.metrics = metrics
        self.rt_placement = None
        if self.vgpu_kinds:
            from batching import RtPlacement

            self.rt_placement = RtPlacement(self.vgpu_kinds)
        self._ids = itertools.count()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._running: set[asyncio.Task] = set()

    # -- lifetime -----------------------------------------------------------------------------------

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._drive_batcher(), name="batcher")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.gather(*self._running, return_exceptions=True)

    @staticmethod
    def now() -> float:
        return time.monotonic()

    # -- requests ------------------------------------------------------------------------------------

    async def infer(self, spec: ModelSpec, request: InferRequest) -> dict[str, np.ndarray]:
        priority = priority_class(spec, request)
        if priority == "rt" and self.rt_placement is None:
            raise ProtocolError("real-time requests need vGPUs to place them on")
        rows = await self._rows(spec, request)
        if priority == "rt" and rows:
            results = await self._run_rt(spec, rows)
        else:
            results = await asyncio.gather(*(self._enqueue(spec, row) for row in rows))
        return {
            out.name: pad_stack([r[out.name] for r in results]) if results else np.zeros((0,))
            for out in spec.outputs
        }

    async def _rows(self, spec: ModelSpec, request: InferRequest) -> list[np.ndarray]:
        by_name = {t.name: t for t in request.inputs}
        if spec.preprocess != "none" and spec.raw_input in by_name:
            raw = by_name[spec.raw_input]
            if raw.datatype != "BYTES":
                raise ProtocolError(f"input {raw.name!r} must be BYTES (a {spec.preprocess} file)")
            return list(await asyncio.gather(*(self._preprocess(spec, b) for b in raw.data.reshape(-1))))
        model_input = spec.inputs[0]
        if model_input.name not in by_name:
            wanted = [spec.raw_input] if spec.preprocess != "none" else []
            raise ProtocolError(f"model {spec.name!r} needs input {' or '.join(wanted + [model_input.name])!r}")
        return self._split_tensor(spec, by_name[model_input.name])

    def _split_tensor(self, spec: ModelSpec, tensor: Tensor) -> list[np.ndarray]:
        want = spec.inputs[0]
        if tensor.datatype != want.datatype:
            raise ProtocolError(f"input {tensor.name!r}: expected {want.datatype}, got {tensor.datatype}")
        shape = tensor.data.shape
        if len(shape) != len(want.dims) + 1 or any(
            d != -1 and d != s for d, s in zip(want.dims, shape[1:])
        ):
            raise ProtocolError(f"input {tensor.name!r}: shape {list(shape)} does not match [-1, "
                                f"{', '.join(map(str, want.dims))}]")  # fmt: skip
        if shape[0] > max(spec.max_batch_size, 1):
            raise ProtocolError(f"batch of {shape[0]} exceeds max_batch_size {spec.max_batch_size}")
        return [np.ascontiguousarray(row, dtype=np.float32) for row in tensor.data]

    async def _preprocess(self, spec: ModelSpec, data: bytes) -> np.ndarray:
        start = time.perf_counter()
        if spec.preprocess == "image":
            result = await asyncio.wrap_future(self.pre.submit_image(bytes(data)))
        else:
            pcm, rate = await asyncio.to_thread(read_wav, bytes(data))
            result = await asyncio.wrap_future(self.pre.submit_audio(pcm, rate))
        self.metrics.preprocess_us.labels(spec.name, result.backend).inc(
            (time.perf_counter() - start) * 1e6)
        return result.array.astype(np.float32, copy=False)

    async def _enqueue(self, spec: ModelSpec, row: np.ndarray) -> dict[str, np.ndarray]:
        from batching import Item

        now = self.now()
        future = asyncio.get_running_loop().create_future()
        # T frames of a centred STFT cover (T - 1) hops: the clip's own duration
        length = (row.shape[-1] - 1) * FRAME_SECONDS if spec.preprocess == "audio" else 1.0
        item = Item(id=next(self._ids), model=spec.name, length=length, arrival=now,
                    payload=Waiting(row, future, now))  # fmt: skip
        self.batcher.add(item, now)
        self._wake.set()
        return await future

    # -- batches -------------------------------------------------------------------------------------

    async def _drive_batcher(self) -> None:
        while True:
            self._wake.clear()
            try:
                dispatches = self.batcher.poll(self.now())
                deadline = self.batcher.next_deadline()
            except Exception:  # a policy bug must not silently stop every later batch
                log.exception("batcher failed; retrying")
                dispatches, deadline = [], self.now() + 0.01
            for dispatch in dispatches:
                task = asyncio.create_task(self._run_batch(dispatch))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
            timeout = None if deadline is None else max(0.0, deadline - self.now())
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass

    async def _run_rt(self, spec: ModelSpec, rows: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
        """One RT batch of the request's rows, placed and submitted at once."""
        now = self.now()
        loop = asyncio.get_running_loop()
        waiting = [Waiting(row, loop.create_future(), now) for row in rows]
        load = {vid: state.inflight_runs for vid, state in self.pool.workers.items()}
        vgpu = self.rt_placement.place(load=load)
        try:
            await self._execute(spec, vgpu, "rt", waiting, "rt")
        finally:
            self.rt_placement.complete(vgpu)
        return list(await asyncio.gather(*(w.future for w in waiting)))

    async def _run_batch(self, dispatch) -> None:
        try:
            await self._execute(self.models[dispatch.model], dispatch.vgpu, "be",
                                [item.payload for item in dispatch.items], str(dispatch.bucket))
        finally:
            self.batcher.on_complete(dispatch.vgpu, self.now())
            self._wake.set()

    async def _execute(self, spec: ModelSpec, vgpu: str, priority: str, waiting: list[Waiting],
                       bucket: str) -> None:
        """Run the rows as one batch on `vgpu` and answer each row's future (its outputs, or the
        batch's error)."""
        start = self.now()
        m = self.metrics
        labels = (spec.name, spec.version)
        m.queue_us.labels(*labels).inc(sum(start - w.enqueued for w in waiting) * 1e6)
        m.batch_size.labels(spec.name, bucket, vgpu).observe(len(waiting))
        try:
            batch = pad_stack([w.tensor for w in waiting])
            outputs = await asyncio.wrap_future(
                self.pool.submit(vgpu, spec.name, {spec.inputs[0].name: batch}, priority))
            for i, w in enumerate(waiting):
                if not w.future.done():
                    w.future.set_result({name: self._row_output(spec, w, batch, arr[i])
                                         for name, arr in outputs.items()})  # fmt: skip
            elapsed = self.now() - start
            if self.latency is not None:
                kind = self.vgpu_kinds.get(vgpu, "cpu")
                self.latency.observe(spec.name, kind, len(waiting), elapsed)
            m.exec_count.labels(*labels).inc()
            m.count.labels(*labels).inc(len(waiting))
            m.compute_us.labels(*labels).inc(elapsed * 1e6)
        except Exception as exc:  # the batch failed: every row's request gets the error
            for w in waiting:
                if not w.future.done():
                    w.future.set_exception(exc)

    @staticmethod
    def _row_output(spec: ModelSpec, w: Waiting, batch: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Trim an audio row's time axis back from the padded batch length to its own share."""
        if spec.preprocess != "audio" or out.ndim < 2 or batch.shape[-1] == w.tensor.shape[-1]:
            return out
        keep = math.ceil(out.shape[0] * w.tensor.shape[-1] / batch.shape[-1])
        return out[:keep]
