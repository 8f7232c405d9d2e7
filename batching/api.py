"""The batcher contract shared by the server's event loop and the discrete-event simulator.

A batcher is a pure policy object: it never reads a clock, sleeps or starts tasks. The caller passes
the current time to every call and asks `next_deadline()` when to call `poll()` again, so the same
object runs on asyncio time in the server and on simulated time in `atoll simulate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from batching.buckets import ModelBatching
    from batching.triton import TritonConfig


@dataclass
class Item:
    """One preprocessed input waiting to be batched."""

    id: Any
    model: str
    # audio seconds; images use 1.0 (their single bucket ignores it)
    length: float
    arrival: float
    payload: Any = None
    # Triton's priority level (1 highest; 0 none): PREBA queues a level ahead of the levels below it
    level: int = 0


@dataclass
class Dispatch:
    """A batch the caller must run on `vgpu`, with every input padded to `pad_length`."""

    model: str
    items: list[Item]
    vgpu: str
    # bucket of the longest input (PREBA), or "all" for the single-queue baselines
    bucket: int | str
    pad_length: float
    # the batch-size limit that applied to this batch (its longest input's Batch_max for PREBA)
    batch_max: int


@dataclass(frozen=True)
class ModelSettings:
    """What a batcher may need of a model added while it runs (`Batcher.add_model`): PREBA reads
    its buckets, the Triton-style baseline its config, static batching neither."""

    batching: ModelBatching
    triton: TritonConfig


class Batcher(Protocol):
    def add_model(self, name: str, settings: ModelSettings) -> None:
        """Batch `name` from now on (replacing its settings if it is known)."""

    def remove_model(self, name: str) -> None:
        """Forget `name`; ValueError (nothing changed) while any of its items is queued."""

    def add(self, item: Item, now: float) -> None:
        """Accept an item; raises ValueError (nothing queued) for an unknown model or length."""

    def poll(self, now: float) -> list[Dispatch]:
        """Every batch due at `now`, each already placed on a vGPU."""

    def next_deadline(self) -> float | None:
        """Earliest time `poll()` may produce work with no new arrival or completion; None if never."""

    def on_complete(self, vgpu: str, now: float) -> None:
        """`vgpu` finished the oldest batch dispatched to it."""

    def pending(self) -> int:
        """Items accepted but not yet dispatched."""


def drop_queue(queues: dict[str, Any], model: str) -> None:
    """`remove_model` of the batchers with one queue per model."""
    if queues.get(model):
        raise ValueError(f"model {model!r} still has items queued")
    queues.pop(model, None)
