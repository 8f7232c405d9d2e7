"""Batches run on a WorkerPool as the server runs them, for the pool's and executors' tests: a model
loaded for slot rows (its `BatchSpec` made from its inputs' and outputs' per-row dims), each batch's
rows written into consecutive slots of one arena (as a front end writes them) and sent with
`WorkerPool.submit_rows`; the outputs read back from the slots."""

from __future__ import annotations

import secrets
import threading
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from gpu_runtime.priority import Priority
from gpu_runtime.vgpu import shm
from gpu_runtime.vgpu.messages import BatchSpec, Row
from gpu_runtime.vgpu.slots import SlotArena, row_layout


@dataclass(frozen=True)
class RowModel:
    """A model's inputs and outputs per row: name -> (dims, numpy dtype); a -1 dimension takes up
    to `bound` in a slot (rows of equal shapes batch together)."""

    inputs: dict[str, tuple[tuple[int, ...], type]]
    outputs: dict[str, tuple[tuple[int, ...], type]]
    bound: int = 1

    def spec(self) -> BatchSpec:
        fields, _ = row_layout([(n, dims, dtype) for n, (dims, dtype) in self.inputs.items()], self.bound)
        first = fields[0]
        return BatchSpec(first.name, first.dims, {n: dims for n, (dims, _) in self.outputs.items()},
                         first.dtype.name, fields, True)  # fmt: skip

    def load(self, pool, name: str, path, executor: str | None = None, max_batch: int | None = None) -> dict:
        """Load it on every worker of `pool` under `name`, for rows."""
        return pool.load_model(name, path, executor, max_batch, batch=self.spec())

    def rows(self, pool, name: str, capacity: int = 4096) -> Batches:
        return Batches(pool, name, self, capacity)


class Batches:
    """Batches of one loaded model, their rows in slots of one arena taken in turn (`capacity` rows
    in all: each batch its own slots, so batches may be in flight at once)."""

    def __init__(self, pool, name: str, model: RowModel, capacity: int):
        self.pool, self.name, self.spec = pool, name, model.spec()
        in_bytes = row_layout([(n, d, t) for n, (d, t) in model.inputs.items()], model.bound)[1]
        out_bytes = row_layout([(n, d, t) for n, (d, t) in model.outputs.items()], model.bound)[1]
        self.arena = SlotArena.create(f"atoll-test-{secrets.token_hex(4)}", capacity, in_bytes, out_bytes)
        self._next = 0
        self._lock = threading.Lock()

    def submit(self, vgpu: str, inputs: dict[str, np.ndarray], priority: str = Priority.BE) -> Future:
        """One batch of every input's rows (along the first axis); the future yields the outputs
        stacked by row (copies), or the pool's error. The pool's refusals raise here."""
        count = len(next(iter(inputs.values())))
        with self._lock:
            first, self._next = self._next, self._next + count
        if self._next > self.arena.count:
            raise ValueError(f"the test arena's {self.arena.count} slots are used up")
        rows = []
        for index in range(first, first + count):
            shapes = []
            for field in self.spec.fields:
                row = np.asarray(inputs[field.name][index - first])
                self.arena.input(index, row.shape, field.dtype, field.offset)[...] = row
                shapes.append(row.shape)
            rows.append(Row(self.arena.name, index, shapes[0], tuple(shapes[1:])))
        running = self.pool.submit_rows(vgpu, self.name, tuple(rows), priority=priority)
        outputs: Future = Future()

        def done(future: Future) -> None:
            try:
                found = [shm.views(self.arena.output(first + i), layout) for i, layout in enumerate(future.result())]
                outputs.set_result({name: np.stack([row[name] for row in found]) for name in found[0]})
            except BaseException as exc:  # the pool's error, to the caller
                outputs.set_exception(exc)

        running.add_done_callback(done)
        return outputs

    def close(self) -> None:
        self.arena.close()

    def __enter__(self) -> Batches:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
