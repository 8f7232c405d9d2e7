"""KServe v2 inference requests as load generators send them, built once before any load runs.

HTTP bodies in Triton's binary tensor extension (what `tritonclient.http` sends: a JSON header of
`Inference-Header-Content-Length` bytes, then each input's raw bytes), and serialized gRPC
`ModelInferRequest`s (what `tritonclient.grpc` sends: the input in `raw_input_contents`). With a
shared-memory region, the input's bytes are not in the request at all: it names the region (Triton's
shared-memory extension). A media request carries one BYTES element per file (4-byte length, then
the bytes); a tensor request the ready FP32 array (PREBA's "Ideal" input, no preprocessing on the
server). Outputs come back in the answer, in binary form.
"""

from __future__ import annotations

import json

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from atoll.kserve.protocol import HEADER_LENGTH, join_bytes

Body = tuple[bytes, dict[str, str]]  # request body and its headers


def _shm(region: str, size: int) -> dict:
    return {"shared_memory_region": region, "shared_memory_byte_size": size}


def http_body(name: str, datatype: str, shape: list[int], data: bytes, priority: int = 0,
              region: str | None = None) -> Body:
    """One input `name` of `data` (its bytes as the binary extension carries them), or in the
    shared-memory `region` holding them. `priority` is Triton's: 1 = real-time, 0 = the model's
    default."""
    parameters = {"binary_data_output": True} | ({"priority": priority} if priority else {})
    where = _shm(region, len(data)) if region else {"binary_data_size": len(data)}
    header = json.dumps({"inputs": [{"name": name, "datatype": datatype, "shape": shape, "parameters": where}],
                         "parameters": parameters}).encode()  # fmt: skip
    if region:
        return header, {"Content-Type": "application/json"}
    return header + data, {HEADER_LENGTH: str(len(header)), "Content-Type": "application/octet-stream"}


def grpc_request(model: str, name: str, datatype: str, shape: list[int], data: bytes, priority: int = 0,
                 region: str | None = None) -> bytes:
    """The same request as `http_body`, as a serialized ModelInferRequest."""
    request = pb.ModelInferRequest(model_name=model)
    if priority:
        request.parameters["priority"].uint64_param = priority
    tensor = request.inputs.add(name=name, datatype=datatype, shape=shape)
    if region:
        tensor.parameters["shared_memory_region"].string_param = region
        tensor.parameters["shared_memory_byte_size"].int64_param = len(data)
    else:
        request.raw_input_contents.append(data)
    return request.SerializeToString()


def media_bytes(files: list[bytes]) -> bytes:
    """BYTES elements, one per file, as the binary extension carries them."""
    return join_bytes(np.array(files, dtype=object))


def infer_body(input_name: str, files: list[bytes], priority: int = 0) -> Body:
    """An HTTP request with one BYTES element per file (JPEG or WAV bytes)."""
    return http_body(input_name, "BYTES", [len(files), 1], media_bytes(files), priority)


def tensor_body(input_name: str, array: np.ndarray, priority: int = 0) -> Body:
    """An HTTP request with one ready FP32 input; `array` carries the batch axis."""
    return http_body(input_name, "FP32", list(array.shape), np.ascontiguousarray(array, dtype="<f4").tobytes(),
                     priority)  # fmt: skip
