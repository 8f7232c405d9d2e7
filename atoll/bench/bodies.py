"""KServe v2 request bodies in Triton's binary tensor extension, built once before any load runs.

What `tritonclient.http` sends: a JSON header of `Inference-Header-Content-Length` bytes, then each
input's raw bytes. A media request carries one BYTES element per file; a tensor request the ready
FP32 array (PREBA's "Ideal" input, no preprocessing on the server).
"""

from __future__ import annotations

import json

import numpy as np

from atoll.protocol import HEADER_LENGTH, join_bytes

Body = tuple[bytes, dict[str, str]]  # request body and its headers


def _body(inputs: list[dict], blob: bytes, priority: int) -> Body:
    """`priority` is Triton's request parameter: 1 = real-time, 0 = the model's default."""
    parameters = {"binary_data_output": True} | ({"priority": priority} if priority else {})
    header = json.dumps({"inputs": inputs, "parameters": parameters}).encode()
    return header + blob, {HEADER_LENGTH: str(len(header)), "Content-Type": "application/octet-stream"}


def infer_body(input_name: str, files: list[bytes], priority: int = 0) -> Body:
    """A request with one BYTES element per file (JPEG or WAV bytes)."""
    blob = join_bytes(np.array(files, dtype=object))
    return _body([{"name": input_name, "datatype": "BYTES", "shape": [len(files), 1],
                   "parameters": {"binary_data_size": len(blob)}}], blob, priority)  # fmt: skip


def tensor_body(input_name: str, array: np.ndarray, priority: int = 0) -> Body:
    """A request with one ready FP32 input; `array` carries the batch axis."""
    blob = np.ascontiguousarray(array, dtype="<f4").tobytes()
    return _body([{"name": input_name, "datatype": "FP32", "shape": list(array.shape),
                   "parameters": {"binary_data_size": len(blob)}}], blob, priority)  # fmt: skip
