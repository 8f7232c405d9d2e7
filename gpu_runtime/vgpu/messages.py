"""What the WorkerPool and its worker processes say to each other: frozen dataclasses, matched by
type on arrival. Only these small descriptions cross the pipe (pickled); tensors never do: they stay
in shared memory (the front ends' `slots` arenas).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from gpu_runtime.priority import Priority
from gpu_runtime.vgpu.shm import Layout

# ---- pool -> worker -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RowInput:
    """One input of a request inside its slot row (`slots.row_layout`)."""

    name: str
    dims: tuple[int, ...]  # without the batch dimension; -1: any size up to the layout's bound
    dtype: np.dtype  # object: BYTES elements, length-prefixed (`slots.pack_bytes`)
    offset: int  # bytes from the start of the slot's input region
    room: int  # bytes it may take there


@dataclass(frozen=True)
class SequenceControl:
    """A control input of a stateful model (`sequence_state`): its kind (start, end, ready, corrid),
    its dtype (object: a string correlation ID) and, for flags, its false and true values."""

    kind: str
    name: str
    dtype: np.dtype
    false_true: tuple = ()


@dataclass(frozen=True)
class SequenceStateSpec:
    """An implicit state: `input_name` gets what `output_name` made last time for the sequence."""

    input_name: str
    output_name: str
    dtype: np.dtype
    dims: tuple[int, ...]


@dataclass(frozen=True)
class SequenceSpec:
    controls: tuple[SequenceControl, ...] = ()
    states: tuple[SequenceStateSpec, ...] = ()


@dataclass(frozen=True)
class RowSequence:
    """A row's place in its sequence: its correlation ID (int or str) and flags."""

    corrid: int | str
    start: bool = False
    end: bool = False


@dataclass(frozen=True)
class BatchSpec:
    """A model's batched input and outputs, so a worker can build batches from slot rows, cut
    each row's outputs back from the padding, and build and warm every shape at load.

    Padded models (the media models: one input, its variable length zero-padded to the batch's
    `length`) name that input; any other model lists every input in `row_inputs`, each at its
    offset in the row, and is batched from rows of equal shapes, unpadded (`batched` False: a row
    is the whole input, run alone, as `max_batch_size: 0` asks)."""

    input_name: str
    input_dims: tuple[int, ...]  # one row, without the batch dimension; -1 marks the variable length
    output_dims: dict[str, tuple[int, ...]]  # the same for each output
    dtype: str = "float32"
    row_inputs: tuple[RowInput, ...] = ()  # given: every input of a request, batched unpadded
    batched: bool = True
    # row_inputs: more warm-up runs (Triton's model_warmup): (batch size, count, ((input, dims, kind), ...)),
    # kind "zero_data" or "random_data"
    warmups: tuple[tuple[int, int, tuple[tuple[str, tuple[int, ...], str], ...]], ...] = ()
    pad_dynamic: bool = False  # row_inputs: rows of other -1 sizes batch, zero-padded to the largest
    sequence: SequenceSpec | None = None  # a stateful model: the inputs the worker fills in itself

    @property
    def padded(self) -> bool:
        """A media model's: its one input zero-padded to each batch's length, every length warmed."""
        return not self.row_inputs

    @functools.cached_property  # (batches read it per batch)
    def fields(self) -> tuple[RowInput, ...]:
        """Every input of a row: `row_inputs`, or a padded model's one input at the row's start (one
        row layout for every model; `room` only matters for BYTES, which a padded input never is)."""
        return self.row_inputs or (RowInput(self.input_name, self.input_dims, np.dtype(self.dtype), 0, 0),)


@dataclass(frozen=True)
class Load:
    req: int
    model: str
    onnx_path: str
    executor: str
    max_batch: int | None  # the largest batch that will be sent; shapes are built up to it
    batch: BatchSpec | None = None  # given: every shape is built and run once before Loaded
    lengths: tuple[int, ...] = ()  # the sizes batches pad their variable dimension to
    instances: int | None = None  # its config's instance_group count on this vGPU (None: the engine's default)


@dataclass(frozen=True)
class Unload:
    """Forget a model; no batch of it is in flight (the caller drained them first)."""

    req: int
    model: str


@dataclass(frozen=True)
class Row:
    """One input row in a front end's slot arena (`slots.SlotArena`), and its own shape (for a
    model with `row_inputs`, the first input's; `more_shapes` the others', in their order)."""

    arena: str
    index: int
    shape: tuple[int, ...]
    more_shapes: tuple[tuple[int, ...], ...] = ()

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        return (self.shape, *self.more_shapes)


@dataclass(frozen=True)
class RunRows:
    """A batch of rows in slots (`WorkerPool.submit_rows`); outputs go back to the rows' slots."""

    req: int
    model: str
    priority: Priority
    rows: tuple[Row, ...]
    length: int | None = None  # every row's variable dimension is zero-padded to this
    sequences: tuple[RowSequence, ...] = ()  # a stateful model: each row's sequence, in row order
    released: tuple[int | str, ...] = ()  # a stateful model: sequences whose state to drop first


@dataclass(frozen=True)
class Stop:
    pass


# ---- worker -> pool -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    pid: int


@dataclass(frozen=True)
class Fatal:
    """The vGPU cannot be set up (e.g. its green context); the worker exits."""

    reason: str


@dataclass(frozen=True)
class Loaded:
    req: int
    description: dict  # the engine's description, plus what the warm-up learned (see worker.py)


@dataclass(frozen=True)
class Unloaded:
    req: int


@dataclass(frozen=True)
class RanRows:
    req: int
    layouts: tuple[Layout, ...]  # each row's outputs, in its slot's output region
    seconds: float  # compute time inside the worker
    program_builds: int  # shapes built after their model's load, in this worker's lifetime


@dataclass(frozen=True)
class Failed:
    req: int
    kind: str  # the exception's type name
    message: str
