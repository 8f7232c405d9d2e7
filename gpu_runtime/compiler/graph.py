"""The builder types of the compiler: runtime values (Tensor), the program builder that collects
buffers and launches while a graph is lowered, and the context a lowering function sees (fusion
look-ahead over the ONNX graph). The importer drives them; `compiler.lowering` uses them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from gpu_runtime.compiler.arena import Lifetime, pack, plan
from gpu_runtime.compiler.program import BufferRef, BufferSpec, KernelDef, Launch, Program


class UnsupportedModelError(ValueError):
    """The model uses an op, attribute or shape the importer cannot lower (named in the message)."""


@dataclass(frozen=True)
class Tensor:
    """A runtime value: a buffer of the program (aliases share their storage)."""

    buf: int
    shape: tuple[int, ...]


Value = Tensor | np.ndarray  # np.ndarray = a value known at import time


class ProgramBuilder:
    """Collects buffers and launches while the graph is lowered, then plans the arena."""

    def __init__(self, model_name: str, batch: int):
        self.model_name, self.batch = model_name, batch
        self.buffers: list[tuple[str, tuple[int, ...], str, int]] = []  # name, shape, role, storage
        self.storage_bytes: list[int] = []
        self.storage_role: list[str] = []
        self.launches: list[Launch] = []
        self.weights: dict[int, np.ndarray] = {}
        self._weight_ids: dict[int, int] = {}
        self._keep: list[np.ndarray] = []  # keeps folded arrays alive so id() stays unique

    def _storage(self, nbytes: int, role: str) -> int:
        self.storage_bytes.append(nbytes)
        self.storage_role.append(role)
        return len(self.storage_bytes) - 1

    def _buffer(self, name: str, shape, role: str, storage: int) -> int:
        self.buffers.append((name, tuple(int(d) for d in shape), role, storage))
        return len(self.buffers) - 1

    def tensor(self, shape, role: str = "temp", name: str | None = None) -> Tensor:
        shape = tuple(int(d) for d in shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * 4
        idx = self._buffer(name or f"t{len(self.buffers)}", shape, role, self._storage(nbytes, role))
        return Tensor(idx, shape)

    def alias(self, t: Tensor, shape) -> Tensor:
        """The same bytes under another shape (Reshape, Flatten, Squeeze, ...)."""
        shape = tuple(int(d) for d in shape)
        if int(np.prod(shape, dtype=np.int64)) != int(np.prod(t.shape, dtype=np.int64)):
            raise UnsupportedModelError(f"cannot view shape {t.shape} as {shape}")
        name, _, role, storage = self.buffers[t.buf]
        return Tensor(self._buffer(f"{name}:view", shape, role, storage), shape)

    def weight(self, value: np.ndarray) -> Tensor:
        """An import-time constant as a weight buffer (float32; one buffer per distinct array)."""
        arr = np.ascontiguousarray(value, dtype=np.float32)
        key = id(value)
        if key not in self._weight_ids:
            self._keep.append(value)
            t = self.tensor(arr.shape, "weight", f"w{len(self.weights)}")
            self.weights[t.buf] = arr
            self._weight_ids[key] = t.buf
        idx = self._weight_ids[key]
        return Tensor(idx, self.buffers[idx][1])

    def as_tensor(self, v: Value) -> Tensor:
        return v if isinstance(v, Tensor) else self.weight(v)

    def launch(self, kernel: KernelDef, grid, block, args, writes: list[Tensor]) -> None:
        refs = tuple(BufferRef(a.buf) if isinstance(a, Tensor) else a for a in args)
        self.launches.append(Launch(kernel, tuple(grid), tuple(block), refs,
                                    tuple(w.buf for w in writes)))

    def finish(self, inputs: dict[str, Tensor], outputs: dict[str, Tensor],
               restore_window: int) -> Program:
        n = len(self.launches)
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for i, launch in enumerate(self.launches):
            for a in launch.args:
                if isinstance(a, BufferRef):
                    s = self.buffers[a.index][3]
                    first.setdefault(s, i)
                    last[s] = i
        # inputs stay intact for the whole program (re-runs need them); outputs are never reused
        pinned_first = {self.buffers[t.buf][3] for t in inputs.values()}
        pinned_last = pinned_first | {self.buffers[t.buf][3] for t in outputs.values()}
        for name, t in outputs.items():
            self.buffers[t.buf] = (name,) + self.buffers[t.buf][1:2] + ("output", self.buffers[t.buf][3])
        for name, t in inputs.items():
            self.buffers[t.buf] = (name,) + self.buffers[t.buf][1:2] + ("input", self.buffers[t.buf][3])
        lifetimes, weight_sizes = [], {}
        for s, nbytes in enumerate(self.storage_bytes):
            if self.storage_role[s] == "weight":
                weight_sizes[s] = nbytes
            elif s in first or s in pinned_last:
                lo = -1 if s in pinned_first else first.get(s, n)
                hi = n if s in pinned_last else last[s] + restore_window
                lifetimes.append(Lifetime(s, nbytes, lo, hi))
        arena_offsets, arena_bytes = plan(lifetimes)
        weight_offsets, weight_bytes = pack(weight_sizes)
        specs, owner = [], {}
        for i, (name, shape, role, s) in enumerate(self.buffers):
            offset = weight_offsets[s] if role == "weight" else arena_offsets.get(s, 0)
            alias = owner.setdefault(s, i)
            specs.append(BufferSpec(name, shape, "float32", offset, role,
                                    alias if alias != i else None))
        return Program(self.model_name, self.batch, specs, self.launches,
                       {k: v.buf for k, v in inputs.items()}, {k: v.buf for k, v in outputs.items()},
                       self.weights, arena_bytes, weight_bytes, restore_window)


def attrs_of(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


class GraphContext:
    """What a lowering function sees: the builder, the node, and fusion look-ahead."""

    def __init__(self, builder: ProgramBuilder, graph: onnx.GraphProto, values: dict[str, Value]):
        self.b = builder
        self.values = values
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.graph_outputs = {o.name for o in graph.output}
        self.fused: set[int] = set()  # id() of nodes absorbed into an earlier node's kernel

    def sole_consumer(self, name: str, op_types: tuple[str, ...]) -> onnx.NodeProto | None:
        users = self.consumers.get(name, [])
        if name in self.graph_outputs or len(users) != 1 or users[0].op_type not in op_types:
            return None
        return users[0]

    def absorb(self, node: onnx.NodeProto) -> None:
        self.fused.add(id(node))

    def const(self, name: str) -> np.ndarray | None:
        v = self.values.get(name)
        return v if isinstance(v, np.ndarray) else None
