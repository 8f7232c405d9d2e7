"""Batches run the way the server runs them: rows in a slot arena, through `WorkerPool.submit_rows`,
the pool's data path (for `atoll profile`, `bench ideal` and `bench worker`)."""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence

import numpy as np
from gpu_runtime.priority import Priority
from gpu_runtime.vgpu import shm
from gpu_runtime.vgpu.batches import full_shape
from gpu_runtime.vgpu.messages import BatchSpec, Row
from gpu_runtime.vgpu.slots import SlotArena, row_layout

from atoll.repository.specs import ModelSpec
from atoll.supervisor import lengths
from atoll.supervisor.model_batching import batch_spec, output_row_bytes


def padded_frames(spec: ModelSpec, seconds: Sequence[float]) -> tuple[int, ...]:
    """The lengths (frames) a model's rows are padded to for these clip lengths; none for images."""
    if -1 not in spec.inputs[0].dims:
        return ()
    return tuple(sorted({lengths.frames(s) for s in seconds}))


def load_for_rows(pool, spec: ModelSpec, max_batch: int, seconds: Sequence[float]) -> int:
    """Load `spec` on every worker as the server does (its BatchSpec; for a media model every batch
    size at every padded length built and run once); returns the bytes one row's outputs take at
    most, as the server sizes them."""
    described = pool.load_model(spec.name, spec.path, max_batch=max_batch, batch=batch_spec(spec),
                                lengths=padded_frames(spec, seconds) if spec.padded else ())  # fmt: skip
    return output_row_bytes(spec, max(d["out_row_bytes"] for d in described.values()))


class SlotRunner:
    """A `knee_profile.Runner`: one batch of `batch` random rows of the model's (first, FP32) input,
    `seconds` long for audio, on one vGPU. Its arena holds `max_batch` rows as the server's does (a
    media model's at the longest of `seconds`); rows are written once per length."""

    def __init__(self, pool, vgpu_id: str, spec: ModelSpec, max_batch: int, seconds: Sequence[float],
                 out_row_bytes: int):
        self.pool, self.vgpu_id, self.spec = pool, vgpu_id, spec
        self.dims = tuple(spec.inputs[0].dims)
        frames = padded_frames(spec, seconds)
        longest = full_shape(self.dims, frames[-1] if frames else None)
        in_bytes = (4 * math.prod(longest) if spec.padded
                    else row_layout(spec.row_fields(), spec.dim_bound, spec.bytes_room)[1])
        self.arena = SlotArena.create(f"atoll-runs-{secrets.token_hex(4)}", max_batch, in_bytes, out_row_bytes)
        self.rng = np.random.default_rng(0)
        self.written: dict[int, tuple[int, ...]] = {}  # slot -> the shape of the row in it

    def __call__(self, batch: int, seconds: float) -> None:
        length = lengths.frames(seconds) if -1 in self.dims else None
        shape = full_shape(self.dims, length)  # the variable axis of an audio input is its frame axis
        for index in range(batch):
            if self.written.get(index) != shape:
                self.arena.input(index, shape)[...] = self.rng.standard_normal(shape, np.float32)
                self.written[index] = shape
        rows = tuple(Row(self.arena.name, index, shape) for index in range(batch))
        self.pool.submit_rows(self.vgpu_id, self.spec.name, rows, length if self.spec.padded else None).result()

    def close(self) -> None:
        self.arena.close()


class BatchRows:
    """Batches of a model loaded with `spec` (a `BatchSpec`: its `fields` at their offsets), their
    rows written into consecutive slots of an arena of their own and run as the server runs rows;
    `run` returns the outputs read back from the slots (copies, stacked by row)."""

    def __init__(self, pool, vgpu_id: str, model: str, spec: BatchSpec, count: int, in_bytes: int,
                 out_row_bytes: int):
        self.pool, self.vgpu_id, self.model, self.spec = pool, vgpu_id, model, spec
        self.arena = SlotArena.create(f"atoll-runs-{secrets.token_hex(4)}", count, in_bytes, out_row_bytes)
        self.rows: tuple[Row, ...] = ()

    def write(self, inputs: dict[str, np.ndarray]) -> None:
        """Each row (along the first axis) of every input into its slot, as a front end copies it."""
        shapes = [[] for _ in range(len(next(iter(inputs.values()))))]
        for field in self.spec.fields:
            for index, data in enumerate(inputs[field.name]):
                self.arena.input(index, data.shape, field.dtype, field.offset)[...] = data
                shapes[index].append(data.shape)
        self.rows = tuple(Row(self.arena.name, index, row[0], tuple(row[1:])) for index, row in enumerate(shapes))

    def run(self, priority: str = Priority.BE) -> dict[str, np.ndarray]:
        layouts = self.pool.submit_rows(self.vgpu_id, self.model, self.rows, priority=priority).result()
        outs = [shm.views(self.arena.output(index), layout) for index, layout in enumerate(layouts)]
        return {name: np.stack([out[name] for out in outs]) for name in outs[0]}

    def close(self) -> None:
        self.arena.close()
