"""Which kernel program a batch needs: an ONNX model's programs are keyed by (batch, length).

Kernel programs have static shapes, so a model served at several batch sizes (and, for audio, frame
counts) needs one program per shape. The key is dim 0 of the first input and the first variable
non-batch dim of any input (None for fixed-shape models).
"""

from __future__ import annotations

import os

import onnx

from gpu_runtime.compiler.importer import import_model

Key = tuple[int, int | None]


class ModelShapes:
    """`precision` ("fp32" or "fp16") is the storage of every program planned for the model."""

    def __init__(self, onnx_path: str | os.PathLike, precision: str = "fp32"):
        self.precision = precision
        self.model = onnx.load(os.fspath(onnx_path))
        weights = {i.name for i in self.model.graph.initializer}
        self.inputs = [v for v in self.model.graph.input if v.name not in weights]

    def _variable_dims(self):
        for value in self.inputs:
            for axis, dim in enumerate(value.type.tensor_type.shape.dim):
                if axis and not dim.HasField("dim_value"):
                    yield value.name, axis

    @property
    def has_length(self) -> bool:
        return next(self._variable_dims(), None) is not None

    def key(self, inputs: dict) -> Key:
        missing = {v.name for v in self.inputs} - set(inputs)
        if missing:
            raise KeyError(f"missing model inputs: {', '.join(sorted(missing))}")
        batch = inputs[self.inputs[0].name].shape[0]
        for name, axis in self._variable_dims():
            return batch, inputs[name].shape[axis]
        return batch, None

    def planned_keys(self, max_batch: int | None) -> list[Key]:
        """Shapes worth planning before traffic: for fixed-shape models, the powers of two up to
        `max_batch` and `max_batch` itself (a variable length cannot be foreseen)."""
        if not max_batch or self.has_length:
            return []
        sizes = {1 << k for k in range(max_batch.bit_length()) if 1 << k <= max_batch}
        return [(batch, None) for batch in sorted(sizes | {max_batch})]

    def program(self, key: Key, name: str | None = None):
        return import_model(self.model, batch=key[0], length=key[1], name=name,
                            precision=self.precision)
