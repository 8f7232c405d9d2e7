"""What the supervisor's `PythonModels` and a model's instance process say to each other over a pipe:
small frozen dataclasses. Tensors never travel here: inputs are read from the front ends' slot rows,
outputs written into them, and a decoupled model's responses into one-off shared-memory segments.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_runtime.vgpu.messages import Row, RowInput
from gpu_runtime.vgpu.shm import Layout

from atoll.repository.specs import TensorSpec

# ---- supervisor -> instance ---------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceSetup:
    """Everything an instance process needs to load its model (picklable for spawn)."""

    model: str
    version: str
    file: str  # the version's model.py
    instance: int  # its index among the model's instances
    model_config: str  # the model configuration in JSON (Triton's `args["model_config"]`)
    fields: tuple[RowInput, ...]  # every input in a slot row (`slots.row_layout`)
    outputs: tuple[TensorSpec, ...]
    batched: bool  # max_batch_size > 0: a request's tensors carry its rows as their first dimension
    decoupled: bool
    server_url: str  # host:port of this server's HTTP endpoint, for BLS requests
    segment_prefix: str  # a decoupled model's responses go to shared-memory segments named from it


@dataclass(frozen=True)
class Execute:
    """Requests to run in one `execute` call, each its rows (one per batch element)."""

    call: int  # numbers the calls, so an answer to an earlier one is never taken for this one's
    requests: tuple[tuple[Row, ...], ...]


@dataclass(frozen=True)
class Stop:
    pass


# ---- instance -> supervisor ---------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    pid: int


@dataclass(frozen=True)
class StartFailed:
    reason: str  # model.py did not import, or `initialize` raised


@dataclass(frozen=True)
class Executed:
    """The `execute` call is over (for a decoupled model: every request's final response sent).
    Per request: its rows' output layouts in their slots, or the error it is answered with."""

    call: int
    results: tuple[tuple[Layout, ...] | str, ...]


@dataclass(frozen=True)
class Streamed:
    """A decoupled model's response to request `request` of the running call: its tensors in the
    one-off segment `segment` at `layout` (None: a final flag without a response), or an error.
    A model's thread may still send after its call failed: `call` says which call it answers."""

    call: int
    request: int
    segment: str | None
    layout: Layout
    final: bool
    error: str = ""
