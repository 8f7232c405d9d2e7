"""The builder types of the compiler: runtime values (Tensor, View and other lazy values), the
program builder that collects buffers and launches while a graph is lowered, the patchable kernel
calls later nodes fuse into, and the context a lowering function sees. The importer drives them;
`compiler.lowering` uses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx

from gpu_runtime.compiler.arena import Lifetime, pack, plan
from gpu_runtime.kernels.source import contiguous_strides
from gpu_runtime.program import BufferRef, BufferSpec, KernelDef, Launch, Program


class UnsupportedModelError(ValueError):
    """The model uses an op, attribute or shape the importer cannot lower (named in the message)."""


@dataclass(frozen=True)
class Tensor:
    """A runtime value: a contiguous buffer of the program (aliases share their storage)."""

    buf: int
    shape: tuple[int, ...]
    dtype: str = "float32"


@dataclass(frozen=True, eq=False)
class View:
    """A lazy window on a buffer (see compiler.view): element u of the view lives at
    table[u_0..u_{k-1}] + sum(u_d * strides[d - k]) of `base`, k = rank - len(strides)."""

    base: Tensor
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    table: np.ndarray  # int64 element offsets over the leading k dims (0-d: an offset)

    @property
    def k(self) -> int:
        return len(self.shape) - len(self.strides)

    @property
    def dtype(self) -> str:
        return self.base.dtype

    @property
    def affine(self) -> bool:
        return self.k == 0

    @property
    def offset(self) -> int:
        assert self.affine
        return int(self.table)

    @property
    def plain(self) -> bool:
        """The whole base buffer in its own order."""
        return self.contiguous_offset() == 0 and tuple(self.shape) == tuple(self.base.shape)

    def contiguous_offset(self) -> int | None:
        """The element offset if the view is one contiguous run of its base, else None."""
        if not self.affine:
            return None
        want = contiguous_strides(self.shape)
        if all(d == 1 or s == w for d, s, w in zip(self.shape, self.strides, want)):
            return self.offset
        return None


class Lazy:
    """A value no launch has computed yet (e.g. a channel-scaled tensor a convolution can scale
    while it loads); `materialize` computes it for consumers that need a buffer."""

    shape: tuple[int, ...]

    def materialize(self, ctx: "GraphContext") -> Tensor:
        raise NotImplementedError

    def parts(self) -> list:
        """The buffer values it is computed from."""
        raise NotImplementedError


Value = Tensor | View | Lazy | np.ndarray  # np.ndarray = a value known at import time


class Call:
    """A kernel call (one or a few launches) whose result later nodes may still fuse into. Each
    `with_*` returns the call rebuilt with that fusion, or None when it cannot absorb it; the
    builder then re-emits it in place (same launch count). `dest` is where the result goes, a
    view in the call's own output coordinates."""

    dest: View

    @property
    def output(self) -> Tensor:
        return self.dest.base

    def launches(self, b: "ProgramBuilder") -> list[Launch]:
        raise NotImplementedError

    def with_act(self, act: str) -> "Call | None":
        return None

    def with_scale(self, scale: float) -> "Call | None":
        return None

    def with_addend(self, addend: View, scale: View | None = None) -> "Call | None":
        """Adds `addend` (times a per-channel `scale`) to the result, in the output's coordinates."""
        return None

    def with_destination(self, dest: View) -> "Call | None":
        """Writes the result through `dest` (a view in the output's coordinates) instead."""
        return None


class ProgramBuilder:
    """Collects buffers and launches while the graph is lowered, then plans the arena.

    `dtype` is the storage of activations and weights ("float32" or "float16"); graph inputs
    and outputs stay float32, and index tables are int32."""

    def __init__(self, model_name: str, batch: int, dtype: str = "float32"):
        self.model_name, self.batch, self.dtype = model_name, batch, dtype
        # name, shape, role, storage, dtype, element offset into the storage
        self.buffers: list[tuple[str, tuple[int, ...], str, int, str, int]] = []
        self.storage_bytes: list[int] = []
        self.storage_role: list[str] = []
        self.launches: list[Launch] = []
        self.weights: dict[int, np.ndarray] = {}
        self._weight_ids: dict[tuple[int, str], int] = {}
        self._keep: list[np.ndarray] = []  # keeps folded arrays alive so id() stays unique
        self._calls: dict[int, tuple[Call, int, int]] = {}  # buffer -> (call, first launch, count)
        self._tables: dict[tuple, Tensor] = {}
        self._zeros = np.zeros(1, np.float32)

    def _storage(self, nbytes: int, role: str) -> int:
        self.storage_bytes.append(nbytes)
        self.storage_role.append(role)
        return len(self.storage_bytes) - 1

    def _buffer(self, name, shape, role, storage, dtype, delta=0) -> int:
        self.buffers.append((name, tuple(int(d) for d in shape), role, storage, dtype, delta))
        return len(self.buffers) - 1

    def tensor(self, shape, role: str = "temp", name: str | None = None,
               dtype: str | None = None) -> Tensor:
        shape = tuple(int(d) for d in shape)
        dtype = dtype or self.dtype
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        idx = self._buffer(name or f"t{len(self.buffers)}", shape, role,
                           self._storage(nbytes, role), dtype)
        return Tensor(idx, shape, dtype)

    def alias(self, t: Tensor, shape, delta: int = 0) -> Tensor:
        """`shape` elements of t's bytes starting `delta` elements in (Reshape, a leading Slice)."""
        shape = tuple(int(d) for d in shape)
        name, tshape, role, storage, dtype, base_delta = self.buffers[t.buf]
        if delta + int(np.prod(shape, dtype=np.int64)) > int(np.prod(tshape, dtype=np.int64)):
            raise UnsupportedModelError(f"cannot view shape {tshape} as {shape} at {delta}")
        return Tensor(self._buffer(f"{name}:view", shape, role, storage, dtype, base_delta + delta),
                      shape, dtype)

    def weight(self, value: np.ndarray, dtype: str | None = None) -> Tensor:
        """An import-time constant as a weight buffer (one buffer per distinct array and dtype);
        float constants are stored in the program's dtype unless `dtype` says otherwise."""
        if dtype is None:
            dtype = "int32" if np.issubdtype(np.asarray(value).dtype, np.integer) else self.dtype
        key = (id(value), dtype)
        if key not in self._weight_ids:
            self._keep.append(value)
            arr = np.ascontiguousarray(value, dtype=dtype)
            t = self.tensor(arr.shape, "weight", f"w{len(self.weights)}", dtype)
            self.weights[t.buf] = arr
            self._weight_ids[key] = t.buf
        idx = self._weight_ids[key]
        return Tensor(idx, self.buffers[idx][1], dtype)

    def table(self, rows: np.ndarray) -> Tensor:
        """An int32 row table as a weight buffer, one per distinct content."""
        arr = np.ascontiguousarray(rows, np.int32)
        key = (arr.shape, arr.tobytes())
        if key not in self._tables:
            self._tables[key] = self.weight(arr, "int32")
        return self._tables[key]

    def dummy(self, dtype: str) -> Tensor:
        """A one-element weight of `dtype` for a kernel pointer this variant never touches
        (kernels keep one signature across variants)."""
        return self.table(np.zeros(1)) if dtype == "int32" else self.weight(self._zeros, dtype)

    def launch(self, kernel: KernelDef, grid, block, args, writes: list[Tensor]) -> None:
        self.launches.append(make_launch(kernel, grid, block, args, writes))

    def emit(self, call: Call, patchable: bool = True) -> Tensor:
        """Appends a call's launches; later nodes may patch it while it stays the output's
        producer (not when it writes only part of its output buffer: a Concat or Pad piece)."""
        launches = call.launches(self)
        if patchable:
            self._calls[call.output.buf] = (call, len(self.launches), len(launches))
        self.launches += launches
        return call.output

    def producer(self, t: Tensor) -> Call | None:
        entry = self._calls.get(t.buf)
        return entry[0] if entry else None

    def position(self, call: Call) -> int:
        """Index of the call's first launch."""
        return self._calls[call.output.buf][1]

    def last_write(self, t: Tensor) -> int:
        """Index of the last launch so far writing t's storage (-1: none, e.g. inputs)."""
        storage = self.buffers[t.buf][3]
        for i in range(len(self.launches) - 1, -1, -1):
            if any(self.buffers[w][3] == storage for w in self.launches[i].writes):
                return i
        return -1

    def replace(self, old: Call, new: Call, patchable: bool = True) -> Tensor:
        """Re-emits `new` where `old`'s launches are. A call redirected into part of a shared
        buffer (a Concat slice) is no longer patchable: others write that buffer too."""
        _, start, count = self._calls.pop(old.output.buf)
        launches = new.launches(self)
        assert len(launches) == count, (old, new)
        self.launches[start:start + count] = launches
        if patchable:
            self._calls[new.output.buf] = (new, start, count)
        return new.output

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
        for role, named in (("output", outputs), ("input", inputs)):
            for name, t in named.items():
                entry = self.buffers[t.buf]
                self.buffers[t.buf] = (name, entry[1], role) + entry[3:]
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
        for i, (name, shape, role, s, dtype, delta) in enumerate(self.buffers):
            offset = weight_offsets[s] if role == "weight" else arena_offsets.get(s, 0)
            alias = owner.setdefault(s, i)
            specs.append(BufferSpec(name, shape, dtype, offset + delta * np.dtype(dtype).itemsize,
                                    role, alias if alias != i else None))
        return Program(self.model_name, self.batch, specs, self.launches,
                       {k: v.buf for k, v in inputs.items()}, {k: v.buf for k, v in outputs.items()},
                       self.weights, arena_bytes, weight_bytes, restore_window)


def make_launch(kernel: KernelDef, grid, block, args, writes: list[Tensor]) -> Launch:
    refs = tuple(BufferRef(a.buf) if isinstance(a, Tensor) else a for a in args)
    return Launch(kernel, tuple(grid), tuple(block), refs, tuple(w.buf for w in writes))


def attrs_of(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


# ops that only re-view their first input: a value reaching a node through them is still "the
# producer's output" for fusion
VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Transpose"}


class GraphContext:
    """What a lowering function sees: the builder, the node's values, and fusion look-ahead.

    `materialize_view` (set by the importer) turns a View into a buffer with one copy."""

    def __init__(self, builder: ProgramBuilder, graph: onnx.GraphProto, values: dict[str, Value],
                 materialize_view: Callable[["GraphContext", View, str | None], Tensor]):
        self.b = builder
        self.values = values
        self.materialize_view = materialize_view
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        self.producers: dict[str, onnx.NodeProto] = {}
        for node in graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
            for name in node.output:
                self.producers[name] = node
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

    def feeds_output(self, name: str) -> bool:
        """True if `name` is a graph output or reaches one through Identity nodes only."""
        while name not in self.graph_outputs:
            users = self.consumers.get(name, [])
            if len(users) != 1 or users[0].op_type != "Identity":
                return False
            name = users[0].output[0]
        return True

    def out_dtype(self, name: str | None) -> str:
        """Storage for a node output: float32 for graph outputs, else the program's dtype."""
        return "float32" if name is not None and self.feeds_output(name) else self.b.dtype

    def readers(self, name: str) -> int:
        """Nodes reading the value `name` (Shape only reads its static shape: not counted)."""
        return sum(n.op_type != "Shape" for n in self.consumers.get(name, []))

    def origin(self, name: str, users: int = 1) -> str | None:
        """The value `name` is a re-view of (back through view ops), if every value on the way,
        and the origin itself, feeds exactly one node (`users` for `name` itself, when a fused
        pattern reads it twice) and is no graph output: such a value's producer may be patched
        (fused into) without anyone else seeing the change."""
        while True:
            if name in self.graph_outputs or self.readers(name) != users:
                return None
            node = self.producers.get(name)
            if node is None or node.op_type not in VIEW_OPS:
                return name
            name, users = node.input[0], 1

    def patchable(self, name: str, users: int = 1) -> tuple[Call, View] | None:
        """(producer call, the value as a view of the call's output) when the value named `name`
        re-views a whole, exclusive, still-patchable kernel result (not part of one: patching
        a Split part would change its siblings too)."""
        origin = self.origin(name, users)
        if origin is None:
            return None
        root = self.values.get(origin)
        if isinstance(root, View) and root.plain:
            root = root.base
        v = self.values.get(name)
        if not isinstance(root, Tensor) or (v.base if isinstance(v, View) else v) != root:
            return None
        call = self.b.producer(root)
        if call is None or not call.dest.plain:
            return None
        return call, v if isinstance(v, View) else View(
            root, root.shape, tuple(contiguous_strides(root.shape)), np.array(0, np.int64))

    def tensor(self, v: Value, name: str | None = None, dtype: str | None = None) -> Tensor:
        """A buffer holding `v` (constants become weights; lazy values are computed). `name` is
        the ONNX name of `v` when known: an exclusive view is then produced in place."""
        if isinstance(v, np.ndarray):
            v = self.b.weight(v)
        elif isinstance(v, Lazy):
            v = v.materialize(self)
        elif isinstance(v, View):
            v = self.materialize_view(self, v, name)
        if dtype is not None and v.dtype != dtype:
            v = self.materialize_view(self, View(v, v.shape, tuple(contiguous_strides(v.shape)),
                                                 np.array(0, np.int64)), None, dtype)
        return v
