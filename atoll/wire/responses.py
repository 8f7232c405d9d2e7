"""Dispatcher -> front end: one response of a decoupled model's request, ahead of its `Done`.

A decoupled model (Triton's `model_transaction_policy { decoupled: true }`) answers a request any
number of times; each response's tensors lie in a one-off shared-memory segment, which the front end
reads once and removes. The request's `Done` follows its final response.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_runtime.vgpu.messages import Row
from gpu_runtime.vgpu.shm import Layout


@dataclass(frozen=True)
class Response:
    row: Row  # the request's first row: the front end's key for it
    segment: str | None  # None: no tensors (an error, or a final flag alone)
    layout: Layout
    final: bool
    error: str = ""
