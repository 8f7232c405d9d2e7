"""Business-logic scripting: a model's `pb_utils.InferenceRequest(...).exec()` run by this server.

The request goes to the server's own HTTP endpoint on the loopback, its tensors in the binary
tensor extension (raw bytes after a JSON header, never pickled), so it is admitted, batched and
answered as any client's request; one keep-alive connection per calling thread. A failure comes back
as Triton's python backend gives it: a response whose `error()` says why.
"""

from __future__ import annotations

import http.client
import json
import threading

import numpy as np

from atoll.kserve.protocol import HEADER_LENGTH, join_bytes, tensor_from_bytes
from atoll.pybackend import pb_utils

TIMEOUT_S = 120.0


class BlsClient:
    def __init__(self, server_url: str):
        self.server_url = server_url  # host:port
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        if getattr(self._local, "connection", None) is None:
            self._local.connection = http.client.HTTPConnection(self.server_url, timeout=TIMEOUT_S)
        return self._local.connection

    def run(self, request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
        header: dict = {"inputs": [], "outputs": [{"name": n, "parameters": {"binary_data": True}}
                                                  for n in request.requested_output_names()]}  # fmt: skip
        if request.request_id():
            header["id"] = request.request_id()
        if request._parameters:
            header["parameters"] = request._parameters
        blobs = []
        for tensor in request.inputs():
            array = tensor.as_numpy()
            blob = join_bytes(array) if tensor.triton_dtype() == "BYTES" else np.ascontiguousarray(array).tobytes()
            header["inputs"].append({"name": tensor.name(), "datatype": tensor.triton_dtype(),
                                     "shape": list(array.shape), "parameters": {"binary_data_size": len(blob)}})  # fmt: skip
            blobs.append(blob)
        head = json.dumps(header).encode()
        version = "" if request._model_version in (-1, "", None) else f"/versions/{request._model_version}"
        path = f"/v2/models/{request.model_name()}{version}/infer"
        try:
            status, headers, body = self._post(path, head + b"".join(blobs), {HEADER_LENGTH: str(len(head))})
        except (OSError, http.client.HTTPException) as exc:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"BLS request to {request.model_name()!r} "
                                                                         f"failed: {exc}"))  # fmt: skip
        return _response(status, headers, body)

    def _post(self, path: str, body: bytes, headers: dict) -> tuple[int, dict, bytes]:
        try:
            return self._post_once(path, body, headers)
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            # a kept-alive connection the server closed meanwhile: once more on a new one
            self._local.connection.close()
            self._local.connection = None
            return self._post_once(path, body, headers)

    def _post_once(self, path: str, body: bytes, headers: dict) -> tuple[int, dict, bytes]:
        connection = self._connection()
        connection.request("POST", path, body, {"Content-Type": "application/octet-stream", **headers})
        answer = connection.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()


def _response(status: int, headers: dict, body: bytes) -> pb_utils.InferenceResponse:
    length = {k.lower(): v for k, v in headers.items()}.get(HEADER_LENGTH.lower())
    head = json.loads(body[: int(length)] if length else body)
    if status != 200:
        code = pb_utils.TritonError.INVALID_ARG if status == 400 else pb_utils.TritonError.INTERNAL
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(head.get("error", f"HTTP {status}"), code))
    binary, tensors = memoryview(body)[int(length) if length else len(body) :], []
    for out in head.get("outputs", []):
        size = (out.get("parameters") or {}).get("binary_data_size")
        if size is None:
            data = np.array(out["data"], dtype=object if out["datatype"] == "BYTES" else None)
            array = data.reshape(out["shape"])
        else:
            array, binary = tensor_from_bytes(out["name"], out["datatype"], out["shape"], binary[:size]), binary[size:]
        tensors.append(pb_utils.Tensor(out["name"], np.array(array)))
    return pb_utils.InferenceResponse(tensors)
