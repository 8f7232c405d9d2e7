"""A stateful model's control inputs and implicit states, filled in by the vGPU worker.

The sequence batcher (batching/sequence.py) decides which request of which sequence runs in which
batch; each row of a `RunRows` then names its sequence (`RowSequence`). Here, per batch: each
control input gets its value per row (START/END as the row's flags, READY true for every row and
false for the zero rows padding a batch to a built size, CORRID the correlation ID), and each state
input the state its sequence's last run left (zeros at START, Triton's default initial state).
After the run the state outputs are kept per sequence, on this vGPU, and taken out of the outputs
that go back to the request; an END row's state is dropped, as is a released sequence's.
A sequence's requests never run in two batches at once, so one lock around the table suffices.
"""

from __future__ import annotations

import threading

import numpy as np

from gpu_runtime.vgpu.messages import RowSequence, SequenceSpec


class SequenceStates:
    def __init__(self):
        self._states: dict[tuple[str, int | str], dict[str, np.ndarray]] = {}  # (model, corrid) -> state
        self._lock = threading.Lock()

    def inputs(self, model: str, spec: SequenceSpec, rows: tuple[RowSequence, ...], batch: int | None,
               released: tuple = ()) -> dict[str, np.ndarray]:
        """The control and state inputs of a batch of `rows` padded to `batch` rows (None: a model
        without batching, one row and no batch axis)."""
        self.forget(model, released)
        n = batch or 1
        out = {}
        for c in spec.controls:
            if c.kind == "corrid":
                values = np.full(n, "" if c.dtype == object else 0, c.dtype)
                values[: len(rows)] = [str(r.corrid) if c.dtype == object else r.corrid for r in rows]
            else:
                flags = np.zeros(n, bool)
                flags[: len(rows)] = [r.start if c.kind == "start" else r.end if c.kind == "end" else True
                                      for r in rows]  # fmt: skip
                values = np.where(flags, c.false_true[1], c.false_true[0]).astype(c.dtype)
            out[c.name] = values[:, None] if batch else values
        with self._lock:
            kept = [None if r.start else self._states.get((model, r.corrid)) for r in rows]
        for s in spec.states:
            values = np.zeros((n, *s.dims), s.dtype)
            for i, state in enumerate(kept):
                if state is not None:
                    values[i] = state[s.input_name]
            out[s.input_name] = values if batch else values[0]
        return out

    def keep(self, model: str, spec: SequenceSpec, rows: tuple[RowSequence, ...], outputs: dict,
             batched: bool, listed=()) -> dict:
        """Store each row's state outputs for its sequence (drop an ended one's); returns the other
        outputs, and those of the state outputs that are `listed` (the config's outputs: a client
        may ask for them, Triton's implicit state management says)."""
        states = {s.input_name: np.asarray(outputs[s.output_name]) for s in spec.states}
        with self._lock:
            for i, r in enumerate(rows):
                if r.end:
                    self._states.pop((model, r.corrid), None)
                elif states:
                    self._states[(model, r.corrid)] = {
                        name: np.array(array[i] if batched else array) for name, array in states.items()}
        dropped = {s.output_name for s in spec.states} - set(listed)
        return {name: array for name, array in outputs.items() if name not in dropped}

    def forget(self, model: str, corrids=None) -> None:
        """Drop these sequences' states (None: every sequence of the model, as it is unloaded)."""
        with self._lock:
            if corrids is None:
                for key in [k for k in self._states if k[0] == model]:
                    del self._states[key]
                return
            for corrid in corrids:
                self._states.pop((model, corrid), None)

    @property
    def held(self) -> int:
        return len(self._states)


def warm_up_inputs(spec: SequenceSpec, batch: int | None) -> dict[str, np.ndarray]:
    """Control and state inputs for a warm-up run: every row a START of sequence 1 (or "1")."""
    rows = tuple(RowSequence(1, True) for _ in range(batch or 1))
    return SequenceStates().inputs("", spec, rows, batch)
