"""Batches from slot rows, inside a vGPU worker: the one copy a row makes, and its outputs' way back.

Every model's rows have one layout: its inputs (`BatchSpec.fields`: a media model's one input, any
other model's every input), each at its offset in the slot. A batch is the rows of a `RunRows`
message, each field stacked along a new first axis: for a padded (media) model every row's variable
dimension zero-padded to the message's length, for any other at the rows' equal shapes (or, where
the spec allows it, `pad_dynamic`, zero-padded to the batch's largest); for executors with static
shapes zero rows are added up to the next batch size the model was built for. Rows that already lie
packed in consecutive slots of one arena at their full shape are run where they are, without a copy
(a lone row always is). Batch buffers are reused, since fresh pages cost a fault each. Each row's
outputs are cut back to its own share of the padded length and stored in its slot. A model that is
not `batched` runs one row as the whole input.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import numpy as np

from gpu_runtime.vgpu import shm
from gpu_runtime.vgpu.messages import BatchSpec, Row, RowInput
from gpu_runtime.vgpu.slots import SlotArena, unpack_bytes


def batch_sizes(max_batch: int | None) -> tuple[int, ...]:
    """The batch sizes built for a model with static shapes: powers of two up to `max_batch`, and
    `max_batch` itself (a smaller batch is padded up to the next one)."""
    if not max_batch:
        return ()
    return tuple(sorted({1 << k for k in range(max_batch.bit_length()) if 1 << k <= max_batch} | {max_batch}))


def padded_size(n: int, sizes: tuple[int, ...]) -> int:
    """The batch size a batch of `n` rows runs at: the smallest built size that holds it."""
    return next((s for s in sizes if s >= n), n)


def variable_axis(dims: tuple[int, ...]) -> int | None:
    axes = [i for i, d in enumerate(dims) if d == -1]
    if len(axes) > 1:
        raise ValueError(f"rows of {dims} have more than one variable dimension")
    return axes[0] if axes else None


def full_shape(dims: tuple[int, ...], length: int | None) -> tuple[int, ...]:
    """A row's shape once padded: `dims` with the variable dimension set to `length`."""
    axis = variable_axis(dims)
    if axis is not None and length is None:
        raise ValueError(f"rows of {dims} need a length to pad to")
    return tuple(length if d == -1 else d for d in dims)


class BatchBuilder:
    def __init__(self):
        self._arenas: dict[str, SlotArena] = {}
        self._free: dict[tuple, list[np.ndarray]] = {}
        self._lock = threading.Lock()  # batches are built on one thread and given back on another

    def arena(self, name: str) -> SlotArena:
        arena = self._arenas.get(name)
        if arena is None:
            arena = self._arenas[name] = SlotArena.attach(name)
        return arena

    def build(self, spec: BatchSpec, rows: tuple[Row, ...], length: int | None,
              sizes: tuple[int, ...]) -> tuple[dict[str, np.ndarray], Callable[[], None]]:
        """Every input of the batch by name, and a function that hands its buffers back once the
        batch has run. Each field is stacked on its own: at its full shape (`length`) for a padded
        model, else at the batch's largest (rows of other sizes only where the spec allows them)."""
        fields = spec.fields
        row_shapes = [row.shapes for row in rows]
        if any(len(shapes) != len(fields) for shapes in row_shapes):
            raise ValueError(f"a row of other than the model's {len(fields)} inputs")
        first = rows[0]
        if length is None and not spec.pad_dynamic and not spec.padded:
            for shapes in row_shapes:
                if shapes != row_shapes[0]:
                    raise ValueError(f"rows of shapes {list(shapes)} and {list(row_shapes[0])} in one batch")
        shapes = _largest(row_shapes) if length is None else tuple(full_shape(f.dims, length) for f in fields)
        for row_shape in row_shapes:
            for field, shape, full in zip(fields, row_shape, shapes):
                self._check(shape, field.dims, full)
        if not spec.batched:
            if len(rows) != 1:
                raise ValueError(f"{len(rows)} rows in one run of a model without batching")
            return {f.name: self._field(first, f, shape) for f, shape in zip(fields, first.shapes)}, _nothing
        n = len(rows)
        batch = padded_size(n, sizes)
        pooled = length is not None or all(row_shape == shapes for row_shape in row_shapes)
        arena = self.arena(first.arena)
        if batch == n and all(r.arena == first.arena and r.index == first.index + i and row_shapes[i] == shapes
                              for i, r in enumerate(rows)):
            if n == 1:  # a lone row at its full shape is run where it is
                return {f.name: self._field(first, f, shape)[None] if f.dtype == object
                        else arena.inputs(first.index, 1, shape, f.dtype, f.offset)
                        for f, shape in zip(fields, shapes)}, _nothing  # fmt: skip
            if len(fields) == 1 and fields[0].dtype != object and arena.packed(shapes[0], fields[0].dtype):
                f = fields[0]  # rows that fill consecutive slots already form the batch
                return {f.name: arena.inputs(first.index, n, shapes[0], f.dtype, f.offset)}, _nothing
        inputs, taken = {}, []
        for k, (f, full) in enumerate(zip(fields, shapes)):
            if f.dtype == object or not pooled:  # fresh: BYTES are decoded; other sizes vary by batch
                buf = np.full((batch, *full), "" if f.dtype == object else 0, f.dtype)
            else:
                key = ((batch, *full), np.dtype(f.dtype).str)
                with self._lock:
                    free = self._free.setdefault(key, [])
                    buf = free.pop() if free else np.empty(key[0], f.dtype)
                taken.append((key, buf))
                buf[n:] = 0
            tail = [slice(None)] * len(full)  # a reused buffer's padding: past a row's length, zeroed
            axis = variable_axis(f.dims) if length is not None else None  # (rows pad only to a length)
            for i, row in enumerate(rows):
                shape = row_shapes[i][k]
                src = self._field(row, f, shape)
                if shape == full:
                    buf[i] = src
                    continue
                buf[i][tuple(slice(0, s) for s in shape)] = src
                if pooled:
                    tail[axis] = slice(shape[axis], None)
                    buf[i][tuple(tail)] = 0
            inputs[f.name] = buf

        def release() -> None:
            with self._lock:
                for key, buf in taken:
                    self._free[key].append(buf)

        return inputs, release

    def _field(self, row: Row, field: RowInput, shape: tuple[int, ...]) -> np.ndarray:
        """One input of a row: a view of its slot, or BYTES elements decoded from it."""
        if field.dtype == object:
            return unpack_bytes(self.arena(row.arena).input(row.index, (field.room,), np.uint8, field.offset), shape)
        return self.arena(row.arena).input(row.index, shape, field.dtype, field.offset)

    @staticmethod
    def _check(shape: tuple[int, ...], dims: tuple[int, ...], full: tuple[int, ...]) -> None:
        if len(shape) != len(dims) or any(
                s > f if d == -1 else s != d for s, d, f in zip(shape, dims, full)):
            raise ValueError(f"row of shape {list(shape)} does not fit a batch of rows {list(full)}")

    def scatter(self, spec: BatchSpec, rows: tuple[Row, ...], outputs: dict[str, np.ndarray],
                length: int | None) -> tuple[shm.Layout, ...]:
        """Store each row's outputs in its slot's output region; returns their layouts. Outputs are
        cut back by the first input's (first) -1 dimension where rows were padded along it."""
        dims = spec.fields[0].dims
        axis = None
        if spec.padded:
            axis = variable_axis(dims)
        elif spec.pad_dynamic and -1 in dims:
            axis = dims.index(-1)
            length = max(row.shape[axis] for row in rows)
        if not spec.batched:  # the outputs of the one row, which has no batch axis
            outputs = {name: np.asarray(array)[None] for name, array in outputs.items()}
        layouts = []
        for i, row in enumerate(rows):
            share = 1.0 if axis is None else row.shape[axis] / length
            mine = {name: _trim(array[i], spec.output_dims.get(name, ()), share)
                    for name, array in outputs.items()}
            region = self.arena(row.arena).output(row.index)
            _, size = shm.plan(mine)
            if size > len(region):
                raise ValueError(f"outputs of {size} bytes exceed the slot's {len(region)}")
            layouts.append(shm.store(region, mine))
        return tuple(layouts)

    def forget(self, names) -> None:
        """Unmap these arenas (their model was unloaded): a mapping kept past its arena's unlink
        would hold its pages, and would be used again for a new arena given the same name."""
        for name in names:
            arena = self._arenas.pop(name, None)
            if arena is not None:
                arena.close()

    def close(self) -> None:
        for arena in self._arenas.values():
            arena.close()
        self._arenas.clear()


def _largest(row_shapes) -> tuple[tuple[int, ...], ...]:
    """Each input's shape in a batch of rows (`Row.shapes` each): the largest size of each
    dimension among them."""
    return tuple(tuple(max(sizes) for sizes in zip(*shapes)) for shapes in zip(*row_shapes))


def _trim(out: np.ndarray, dims: tuple[int, ...], share: float) -> np.ndarray:
    """A row's output cut back along its (first) variable dimension to the row's share of the
    padding; a row that was not padded keeps its output whole, however many dimensions vary."""
    if share >= 1.0 or len(dims) != out.ndim or -1 not in dims:
        return out
    axis = dims.index(-1)
    keep = math.ceil(out.shape[axis] * share)
    return out[tuple(slice(0, keep) if a == axis else slice(None) for a in range(out.ndim))]


def _nothing() -> None:
    pass
