"""The batcher contract shared by the server's event loop and the discrete-event simulator.

A batcher is a pure policy object: it never reads a clock, sleeps or starts tasks. The caller passes
the current time to every call and asks `next_deadline()` when to call `poll()` again, so the same
object runs on asyncio time in the server and on simulated time in `atoll simulate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass
class Item:
    """One preprocessed input waiting to be batched."""

    id: Any
    model: str
    # audio seconds; images use 1.0 (their single bucket ignores it)
    length: float
    arrival: float
    payload: Any = None


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


class Batcher(Protocol):
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
