"""The protocol's datatypes as NumPy dtypes, and the error a client's malformed request raises.

BF16 is ml_dtypes' bfloat16 (ml_dtypes comes with onnx). BYTES tensors are object arrays of `bytes`.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(object),
}

_KINDS = {type(None): "null", bool: "a boolean", int: "an integer", float: "a number", str: "a string",
          list: "an array", dict: "an object"}  # fmt: skip


class ProtocolError(ValueError):
    """A request that does not follow the protocol (answered with HTTP 400)."""


def described(value: Any) -> str:
    """A client's value as an error message shows it: a number of up to 20 digits as itself, any other
    value by its JSON type (a Python repr of what a client sent is no answer to give it)."""
    if type(value) in (int, float) and abs(value) < 1e20:
        return str(value)
    return _KINDS.get(type(value), "a value of no JSON type")


def is_count(value: Any) -> bool:
    """Whether `value` is a non-negative integer (JSON's true and false are not numbers)."""
    return type(value) is int and value >= 0
