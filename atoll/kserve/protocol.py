"""KServe v2 / Triton inference protocol: tensors in JSON and in the binary tensor extension.

Binary extension (as `tritonclient.http` sends it): the body is a JSON header of
`Inference-Header-Content-Length` bytes followed by the raw tensors in input order; an input with
`parameters.binary_data_size` takes its bytes from there. BYTES tensors, in binary form, are each
element as a 4-byte little-endian length followed by its bytes.

Each field of a request is checked for its type and range as it is read (a ProtocolError, answered
400, names the field and what it wants), so every later stage sees well-typed values.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from atoll.kserve.datatypes import DTYPES, ProtocolError, described, is_count
from atoll.kserve.json_tensors import Skeleton, Span, Steps, json_values, skeleton, sliced_sync, values

HEADER_LENGTH = "Inference-Header-Content-Length"
_NAMES = {dt: name for name, dt in DTYPES.items() if name != "BYTES"}
# one compact encoder for every answer: json.dumps with separators would build one per call
_COMPACT = json.JSONEncoder(separators=(",", ":"))


@dataclass
class Tensor:
    name: str
    datatype: str
    shape: list[int]
    data: np.ndarray  # dtype object (of bytes) for BYTES
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class InferRequest:
    id: str | None
    inputs: list[Tensor]
    outputs: list[dict[str, Any]]  # requested outputs: {"name", "parameters"}
    parameters: dict[str, Any]


def datatype_of(array: np.ndarray) -> str:
    if array.dtype == object or array.dtype.kind in ("S", "U"):
        return "BYTES"
    try:
        return _NAMES[array.dtype]
    except KeyError:
        raise ProtocolError(f"no protocol datatype for numpy dtype {array.dtype}") from None


def _split_bytes(raw: bytes, count: int, name: str) -> np.ndarray:
    items, pos = [], 0
    for _ in range(count):
        if pos + 4 > len(raw):
            raise ProtocolError(f"input {name!r}: BYTES data ends inside an element length")
        (n,) = struct.unpack_from("<I", raw, pos)
        pos += 4
        if pos + n > len(raw):
            raise ProtocolError(f"input {name!r}: BYTES element of {n} bytes runs past the data")
        items.append(bytes(raw[pos : pos + n]))
        pos += n
    if pos != len(raw):
        raise ProtocolError(f"input {name!r}: {len(raw) - pos} bytes left after {count} elements")
    out = np.empty(count, dtype=object)
    out[:] = items
    return out


def join_bytes(array: np.ndarray) -> bytes:
    parts = []
    for item in array.reshape(-1):
        b = item if isinstance(item, bytes) else str(item).encode()
        parts.append(struct.pack("<I", len(b)) + b)
    return b"".join(parts)


# -- the checks of a request's fields: one per kind of field, each naming the field and what it wants --

MAX_DIMS = 32  # numpy makes arrays of at most 64 dimensions (32 before numpy 2); no model has nearly so many
# numpy refuses an array of more than intp's maximum in bytes (zero dimensions aside); 8 bytes is the
# widest element (INT64, FP64, a BYTES element's object pointer)
MAX_ELEMENTS = np.iinfo(np.intp).max // 8


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ProtocolError(f"{what} must be a string, got {described(value)}")
    return value


def _object(value: Any, what: str) -> dict[str, Any]:
    """An optional JSON object (a `parameters`): {} where it is absent or null."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} must be a JSON object, got {described(value)}")
    return value


def element_count(shape: list[int], name: str) -> int:
    """The number of elements of input `name`'s `shape`, once it is known to be one numpy can make
    an array of: a list of at most MAX_DIMS non-negative integers, of at most MAX_ELEMENTS elements
    with its zero dimensions left out."""
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(map(is_count, shape)):
        raise ProtocolError(f"input {name!r}: shape must be a list of at most {MAX_DIMS} non-negative integers")
    if math.prod(d for d in shape if d) > MAX_ELEMENTS:
        raise ProtocolError(f"input {name!r}: shape {shape} has too many elements")
    return math.prod(shape)


def tensor_from_bytes(name: str, datatype: str, shape: list[int], raw) -> np.ndarray:
    """A tensor's elements from its raw bytes (binary extension, gRPC raw contents, shared memory),
    without a copy where the datatype allows; BYTES elements are length-prefixed."""
    count = element_count(shape, name)
    if datatype == "BYTES":
        return _split_bytes(raw, count, name).reshape(shape)
    dt = DTYPES[datatype]
    if len(raw) != count * dt.itemsize:
        raise ProtocolError(f"input {name!r}: {len(raw)} bytes for {count} {datatype} elements")
    return np.frombuffer(raw, dtype=dt.newbyteorder("<")).astype(dt, copy=False).reshape(shape)


@dataclass(frozen=True)
class SharedMemoryRef:
    """Where a tensor lies in a registered shared-memory region (Triton's shared-memory extension)."""

    region: str
    offset: int
    byte_size: int


def shared_memory_of(parameters: dict[str, Any], what: str) -> SharedMemoryRef | None:
    """The shared-memory parameters of an input or requested output, if it has them."""
    region, size = parameters.get("shared_memory_region"), parameters.get("shared_memory_byte_size")
    if region is None and size is None:
        return None
    offset = parameters.get("shared_memory_offset", 0)
    if region is None or size is None:
        raise ProtocolError(f"{what}: shared_memory_region and shared_memory_byte_size go together")
    if not isinstance(region, str) or not (is_count(size) and is_count(offset)):
        raise ProtocolError(f"{what}: bad shared-memory parameters")
    return SharedMemoryRef(region, offset, size)


@dataclass
class InputHead:
    """An input's fields but its data, checked."""

    name: str
    datatype: str
    shape: list[int]
    count: int
    parameters: dict[str, Any]


def input_head(spec: Any) -> InputHead:
    if not isinstance(spec, dict):
        raise ProtocolError(f"each input must be a JSON object, got {described(spec)}")
    try:
        name, datatype, shape = spec["name"], spec["datatype"], spec["shape"]
    except KeyError:
        raise ProtocolError("each input needs name, datatype and shape") from None
    name = _string(name, "an input's name")
    if _string(datatype, f"input {name!r}: datatype") not in DTYPES:
        raise ProtocolError(f"input {name!r}: unknown datatype {datatype!r}")
    count = element_count(shape, name)
    return InputHead(name, datatype, list(shape), count, _object(spec.get("parameters"), f"input {name!r}: parameters"))


def _input_data(body, spec: dict, head: InputHead, binary: memoryview | None, offset: int, regions) -> Steps:
    """An input's tensor and the binary data's offset past it: from shared memory, the binary
    extension's data, or its JSON `data` (a `json_tensors.Span`)."""
    name, size = head.name, head.parameters.get("binary_data_size")
    if size is not None and not is_count(size):
        raise ProtocolError(f"input {name!r}: binary_data_size must be a non-negative integer, got {described(size)}")
    shm = shared_memory_of(head.parameters, f"input {name!r}")
    if shm is not None:
        if "data" in spec or size is not None:
            raise ProtocolError(f"input {name!r}: data given beside shared memory")
        return tensor_from_bytes(name, head.datatype, head.shape, regions.read(shm)), offset
    if size is not None:
        if binary is None or offset + size > len(binary):
            raise ProtocolError(f"input {name!r}: binary_data_size {size} exceeds the request body")
        # a view: the tensor is copied once, into its slot
        return tensor_from_bytes(name, head.datatype, head.shape, binary[offset : offset + size]), offset + size
    if "data" not in spec:
        raise ProtocolError(f"input {name!r}: neither data nor binary_data_size given")
    if not isinstance(spec["data"], Span):
        raise ProtocolError(f"input {name!r}: data must be an array, got {described(spec['data'])}")
    data = yield from values(body, spec["data"], head.datatype, head.shape, head.count, name)
    return data, offset


def _requested(value: Any) -> list[dict[str, Any]]:
    """A request's `outputs`, each as {"name": its name, "parameters": a dict}."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProtocolError(f"outputs must be an array, got {described(value)}")
    outputs = []
    for spec in value:
        if not isinstance(spec, dict):
            raise ProtocolError(f"each requested output must be a JSON object, got {described(spec)}")
        name = _string(spec.get("name"), "a requested output's name")
        outputs.append({"name": name, "parameters": _object(spec.get("parameters"), f"output {name!r}: parameters")})
    return outputs


def json_object(raw: bytes, what: str) -> dict:
    """`raw` parsed as the JSON object a request's `what` must be (a small body: not an infer
    request's); ProtocolError otherwise. Nesting deeper than Python's recursion limit is a client's
    error too (json raises RecursionError: it was a 500 with a traceback)."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ProtocolError(f"{what} nests too deeply") from None
    if not isinstance(doc, dict):
        raise ProtocolError(f"{what} must be a JSON object")
    return doc


def request_skeleton(body, header_length: int | None = None, complete: bool = True) -> Steps:
    """The `json_tensors.Skeleton` of an HTTP infer request: its whole body, or its first
    `header_length` bytes when binary data follows; no input's data parsed. `complete` False: `body`
    is the body's first bytes (`json_tensors.skeleton`)."""
    if header_length is not None and not 0 <= header_length <= len(body):
        raise ProtocolError(f"{HEADER_LENGTH} {header_length} is outside the body of {len(body)} bytes")
    return skeleton(body, complete, header_length)


def request_parameters(header: dict) -> dict:
    return _object(header.get("parameters"), "request parameters")


def decoding(body, header_length: int | None = None, regions=None, skeleton_: Skeleton | None = None,
             check=None) -> Steps:
    """An infer request from its body, in slices (`json_tensors.sliced`). `regions`
    (`shm_registry.Regions`) supplies inputs in shared memory; `skeleton_` is `request_skeleton`'s
    answer where it was read already; `check(skeleton, heads)`, where given, sees every input's
    fields (`InputHead`s) before any input's data is parsed (a model's refusal then costs no parse)."""
    binary = None if header_length is None else memoryview(body)[header_length:]
    if skeleton_ is None:
        skeleton_ = yield from request_skeleton(body, header_length)
    doc = skeleton_.fields
    if skeleton_.inputs is None:
        raise ProtocolError("request must be a JSON object with an 'inputs' list")
    request_id = doc.get("id")
    if request_id is not None:
        _string(request_id, "request id")
    parameters = request_parameters(doc)
    outputs = _requested(doc.get("outputs"))
    heads = [input_head(spec) for spec in skeleton_.inputs]
    if check is not None:
        check(skeleton_, heads)
    offset, inputs = 0, []
    for spec, head in zip(skeleton_.inputs, heads):
        data, offset = yield from _input_data(body, spec, head, binary, offset, regions)
        inputs.append(Tensor(head.name, head.datatype, head.shape, data, head.parameters))
    return InferRequest(request_id, inputs, outputs, parameters)


def decode_request(body, header_length: int | None = None, regions=None) -> InferRequest:
    """`decoding`, run to its end at once."""
    return sliced_sync(decoding(body, header_length, regions))


@dataclass
class Output:
    """One output of an answer: its tensor, or None where it was written to shared memory, and the
    parameters it was requested with (empty for outputs returned unasked)."""

    name: str
    data: np.ndarray | None
    datatype: str
    shape: list[int]
    parameters: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, array: np.ndarray, parameters: dict[str, Any] | None = None) -> Output:
        return cls(name, array, datatype_of(array), list(array.shape), parameters or {})


def requested_outputs(request: InferRequest, available: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """The outputs to return, each with the parameters it was asked for with: those the request
    names, in its order, else every output."""
    if not request.outputs:
        return [(name, {}) for name in available]
    wanted = []
    for spec in request.outputs:
        if spec["name"] not in available:
            raise ProtocolError(f"unknown output {spec['name']!r} (model has {', '.join(available)})")
        wanted.append((spec["name"], spec["parameters"]))
    return wanted


def encode_response(model: str, version: str, request_id: str | None, outputs: list[Output],
                    binary: set[str]) -> tuple[bytes, dict[str, str]]:
    """Body and headers; outputs named in `binary` go in the binary extension, outputs in shared
    memory carry no data."""
    specs, blobs = [], []
    for out in outputs:
        spec: dict[str, Any] = {"name": out.name, "datatype": out.datatype, "shape": out.shape}
        array = out.data
        data = None
        if array is None:
            pass
        elif out.name in binary:
            blob = join_bytes(array) if out.datatype == "BYTES" else np.ascontiguousarray(array).tobytes()
            spec["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        elif out.datatype == "BYTES":
            spec["data"] = [b.decode(errors="replace") for b in array.reshape(-1)]
        else:
            data = json_values(array)  # written by NumPy, not a Python number per element
        text = _json(spec)
        specs.append(text if data is None else text[:-1] + b',"data":' + data + b"}")
    doc: dict[str, Any] = {"model_name": model, "model_version": version}
    if request_id is not None:
        doc["id"] = request_id
    header = _json(doc)[:-1] + b',"outputs":[' + b",".join(specs) + b"]}"
    if not blobs:
        return header, {"Content-Type": "application/json"}
    headers = {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(header))}
    return header + b"".join(blobs), headers


def _json(value: Any) -> bytes:
    return _COMPACT.encode(value).encode()


def binary_outputs(request: InferRequest, outputs: list[Output]) -> set[str]:
    """Which outputs go in binary form: as each was requested, else the request-wide default."""
    default = bool(request.parameters.get("binary_data_output", False))
    return {out.name for out in outputs if out.parameters.get("binary_data", default)}
