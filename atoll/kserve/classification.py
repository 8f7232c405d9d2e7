"""Triton's classification extension: an output requested with the `classification` parameter set
to N comes back as the N highest-valued classes of each batch row instead of its values, a BYTES
tensor of shape [batch, N] whose elements read "<value>:<index>[:<label>]" (the value printed as C's
"%f", as Triton prints it; the label from the output's `label_filename`, one label per line, where
the model's config names one).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def load_labels(path: Path) -> tuple[str, ...]:
    return tuple(path.read_text().splitlines())


def classify(array: np.ndarray, count: int, labels: tuple[str, ...] = (), batched: bool = True) -> np.ndarray:
    """The top `count` classes of each row of `array` (of the whole array when not `batched`),
    highest first, ties in index order."""
    rows = array.reshape(len(array), -1) if batched else array.reshape(1, -1)
    count = min(count, rows.shape[1])
    top = np.argsort(-rows.astype(np.float64), axis=1, kind="stable")[:, :count]
    values = np.take_along_axis(rows, top, axis=1)
    out = np.empty(top.shape, dtype=object)
    for (r, k), index in np.ndenumerate(top):
        label = f":{labels[index]}" if index < len(labels) else ""
        out[r, k] = f"{float(values[r, k]):f}:{index}{label}".encode()
    return out if batched else out[0]
