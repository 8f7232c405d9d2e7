"""`triton_python_backend_utils`: the module a Python-backend model imports (as `pb_utils`).

Written here from the API Triton's python backend documents
(https://github.com/triton-inference-server/python_backend#usage): tensors, requests, responses,
errors, the response sender of decoupled models, business-logic scripting (`InferenceRequest.exec`
and `async_exec`, answered by this server) and the logger. The instance process (`instance.py`)
registers it under Triton's name and sets the two hooks a model's calls reach: `_bls` (how a BLS
request is run) and each request's response sender.
"""

from __future__ import annotations

import asyncio
import json
import logging

import numpy as np

from atoll.kserve.datatypes import DTYPES

log = logging.getLogger(__name__)

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1  # a response sender's flag: the request's last response
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2

_bls = None  # the instance's BLS client: `run(InferenceRequest) -> InferenceResponse` (bls.py)


class TritonModelException(Exception):
    """Raised by this API's calls on a misuse (Triton's name)."""


class TritonError:
    """An error a model answers a request with: `InferenceResponse(error=TritonError("..."))`."""

    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = INTERNAL):
        self._message = str(message)
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r})"


class Tensor:
    """A named tensor: `Tensor(name, numpy_array)`; BYTES tensors are object arrays of bytes."""

    def __init__(self, name: str, array):
        if not isinstance(name, str):
            raise TritonModelException(f"a tensor's name must be a string, got {type(name).__name__}")
        array = np.asarray(array)
        if array.dtype.kind in "SU":  # string arrays travel as BYTES, as Triton's own Tensor takes them
            array = array.astype(object)
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> str:
        return numpy_to_triton_type(self._array.dtype)

    def is_cpu(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, {self.triton_dtype()} {self.shape()})"


class InferenceResponse:
    def __init__(self, output_tensors=None, error: TritonError | None = None, parameters=None):
        self._outputs = list(output_tensors or [])
        if error is not None and not isinstance(error, TritonError):
            raise TritonModelException("InferenceResponse's error must be a TritonError")
        self._error = error
        self._parameters = parameters or {}

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return json.dumps(self._parameters)


class InferenceResponseSender:
    """A decoupled model's way to answer: `send(response, flags)` any number of times, the last with
    `flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL` (with or without a response)."""

    def __init__(self, deliver):
        self._deliver = deliver  # (response or None, final: bool) -> None, set by the instance
        self._closed = False

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if self._closed:
            raise TritonModelException("this request's final response was already sent")
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None and not final:
            raise TritonModelException("send() without a response must carry TRITONSERVER_RESPONSE_COMPLETE_FINAL")
        self._closed = final
        self._deliver(response, final)

    def is_cancelled(self) -> bool:
        return False


class InferenceRequest:
    """A request: those `execute` receives, and those a model builds to call another model (BLS):
    `InferenceRequest(model_name=..., requested_output_names=[...], inputs=[...]).exec()`."""

    def __init__(self, model_name: str = "", inputs=None, requested_output_names=None, model_version: int = -1,
                 request_id: str = "", correlation_id: int = 0, flags: int = 0, timeout: int = 0,
                 parameters=None, **_):  # fmt: skip
        self._model_name, self._model_version = model_name, model_version
        self._inputs = list(inputs or [])
        self._requested = list(requested_output_names or [])
        self._request_id, self._correlation_id, self._flags, self._timeout = request_id, correlation_id, flags, timeout
        if isinstance(parameters, str):
            parameters = json.loads(parameters)
        self._parameters = dict(parameters or {})
        self._sender: InferenceResponseSender | None = None

    def model_name(self) -> str:
        return self._model_name

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._requested

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        return json.dumps(self._parameters)

    def is_cancelled(self) -> bool:
        return False

    def get_response_sender(self) -> InferenceResponseSender:
        if self._sender is None:
            raise TritonModelException("a response sender belongs to requests of a decoupled model")
        return self._sender

    def exec(self, decoupled: bool = False):
        """Run this request on the model it names, in this server; its response (an error response
        when it fails, as Triton's). `decoupled=True`: an iterator over the responses."""
        if _bls is None:
            raise TritonModelException("BLS requests can be run only inside a model's instance")
        response = _bls.run(self)
        return iter([response]) if decoupled else response

    async def async_exec(self, decoupled: bool = False):
        return await asyncio.to_thread(self.exec, decoupled)


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    return next((t for t in request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in response.output_tensors() if t.name() == name), None)


def _config_entry(model_config: dict, key: str, name: str) -> dict:
    return next((entry for entry in model_config.get(key, []) if entry.get("name") == name), {})


def get_input_config_by_name(model_config: dict, name: str) -> dict:
    return _config_entry(model_config, "input", name)


def get_output_config_by_name(model_config: dict, name: str) -> dict:
    return _config_entry(model_config, "output", name)


def using_decoupled_model_transaction_policy(model_config: dict) -> bool:
    return bool((model_config.get("model_transaction_policy") or {}).get("decoupled", False))


def triton_string_to_numpy(triton_type: str) -> type:
    """`TYPE_FP32` (a config's name) or `FP32` (the protocol's) as a numpy type (BYTES: object)."""
    name = triton_type.removeprefix("TYPE_").replace("STRING", "BYTES")
    if name not in DTYPES:
        raise TritonModelException(f"unknown Triton datatype {triton_type!r}")
    return DTYPES[name].type


def numpy_to_triton_type(dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype == object or dtype.kind in "SU":
        return "BYTES"
    for name, known in DTYPES.items():
        if name != "BYTES" and known == dtype:
            return name
    raise TritonModelException(f"numpy dtype {dtype} has no Triton datatype")


class Logger:
    """`pb_utils.Logger.log_info("...")`: into the server's log, under the model's process."""

    INFO, WARNING, ERROR, VERBOSE = "INFO", "WARNING", "ERROR", "VERBOSE"

    @staticmethod
    def log(message: str, level: str = "INFO") -> None:
        log.log(logging.DEBUG if level == "VERBOSE" else getattr(logging, level, logging.INFO), "%s", message)

    @staticmethod
    def log_info(message: str) -> None:
        log.info("%s", message)

    @staticmethod
    def log_warn(message: str) -> None:
        log.warning("%s", message)

    @staticmethod
    def log_error(message: str) -> None:
        log.error("%s", message)

    @staticmethod
    def log_verbose(message: str) -> None:
        log.debug("%s", message)


LogLevel = Logger
