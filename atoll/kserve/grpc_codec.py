"""The KServe v2 gRPC messages (`inference.GRPCInferenceService`'s, as `tritonclient[grpc]` ships them,
generated from Triton's protos) to and from the protocol's requests and outputs (`protocol`), for the
front ends' gRPC service and the cluster endpoint's. Tensors arrive as `raw_input_contents` (what
`tritonclient.grpc` sends), typed `contents`, or shared-memory references, and leave as
`raw_output_contents` (an empty entry for an output written to shared memory, as Triton does).
"""

from __future__ import annotations

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from atoll.kserve.protocol import (
    DTYPES,
    InferRequest,
    Output,
    ProtocolError,
    Tensor,
    element_count,
    join_bytes,
    shared_memory_of,
    tensor_from_bytes,
)

CONTENTS = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
            "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
            "UINT32": "uint_contents", "UINT64": "uint64_contents", "FP32": "fp32_contents",
            "FP64": "fp64_contents", "BYTES": "bytes_contents"}  # fmt: skip


def proto_parameters(entries) -> dict:
    return {key: getattr(value, value.WhichOneof("parameter_choice")) for key, value in entries.items()
            if value.WhichOneof("parameter_choice")}  # fmt: skip


# which datatypes' typed contents are fixed-width little-endian values once packed on the wire
_FIXED = {"FP32": "<f4", "FP64": "<f8"}
_VARINT_SLICE = 1 << 20  # bytes of packed varints decoded at once (temporaries ~8x that)


def _typed_contents(t, count: int) -> np.ndarray:
    """Input `t`'s typed contents as an array of its datatype, read from the contents' packed wire
    form (the protobuf runtime has no buffer of a repeated field): fixed-width values viewed,
    varints decoded by NumPy, no Python object per element but for BYTES."""
    field = CONTENTS.get(t.datatype)
    if field is None:
        raise ProtocolError(f"input {t.name!r}: {t.datatype} needs raw_input_contents")
    if t.datatype == "BYTES":
        values = np.empty(len(getattr(t.contents, field)), object)
        values[:] = list(getattr(t.contents, field))
    else:
        payload = _packed(t.contents.SerializeToString(), t.contents.DESCRIPTOR.fields_by_name[field].number)
        values = np.frombuffer(payload, _FIXED[t.datatype]) if t.datatype in _FIXED else _varints(payload)
    if len(values) != count:
        raise ProtocolError(f"input {t.name!r}: {len(values)} values for shape {list(t.shape)}")
    if t.datatype in _FIXED or t.datatype == "BYTES":
        return values.astype(DTYPES[t.datatype], copy=False)
    if t.datatype == "BOOL":
        return values != 0
    dt = DTYPES[t.datatype]
    signed = values.view(np.int64) if dt.kind == "i" else values  # int32s are sign-extended varints
    info = np.iinfo(dt)
    if len(signed) and (signed.min() < info.min or signed.max() > info.max):
        raise ProtocolError(f"input {t.name!r}: a value is outside the range of {t.datatype}")
    return signed.astype(dt)


def _packed(message: bytes, number: int) -> bytes:
    """The payloads of field `number` (packed, length-delimited) in a serialized message, joined."""
    parts, pos = [], 0
    while pos < len(message):
        tag, pos = read_varint(message, pos)
        if tag & 7 != 2:  # the contents' repeated scalars are packed; nothing else is written
            raise ProtocolError("typed contents in a form this server does not read")
        size, pos = read_varint(message, pos)
        if tag >> 3 == number:
            parts.append(message[pos : pos + size])
        pos += size
    return b"".join(parts)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return value, pos


def _varints(payload: bytes) -> np.ndarray:
    """Packed varints as uint64, decoded a slice at a time."""
    data = np.frombuffer(payload, np.uint8)
    ends = np.flatnonzero(data < 0x80)
    out = np.empty(len(ends), np.uint64)
    first = 0
    for lo in range(0, len(ends), _VARINT_SLICE):
        last = ends[min(lo + _VARINT_SLICE, len(ends)) - 1]
        chunk, stops = data[first : last + 1], ends[lo : lo + _VARINT_SLICE] - first
        starts = np.concatenate(([0], stops[:-1] + 1))
        offset = np.arange(len(chunk)) - np.repeat(starts, stops - starts + 1)
        parts = (chunk & 0x7F).astype(np.uint64) << (7 * offset).astype(np.uint64)
        out[lo : lo + len(stops)] = np.bitwise_or.reduceat(parts, starts)
        first = last + 1
    return out


def _tensor(t, raw_contents, regions) -> Tensor:
    params, shape = proto_parameters(t.parameters), list(t.shape)
    if t.datatype not in DTYPES:
        raise ProtocolError(f"input {t.name!r}: unknown datatype {t.datatype!r}")
    count = element_count(shape, t.name)
    ref = shared_memory_of(params, f"input {t.name!r}")
    if ref is not None:
        data = tensor_from_bytes(t.name, t.datatype, shape, regions.read(ref))
    elif raw_contents is not None:
        raw = next(raw_contents, None)
        if raw is None:
            raise ProtocolError(f"input {t.name!r}: no raw_input_contents left for it")
        data = tensor_from_bytes(t.name, t.datatype, shape, raw)
    else:
        data = _typed_contents(t, count).reshape(shape)
    return Tensor(t.name, t.datatype, shape, data, params)


def request_from_proto(msg: pb.ModelInferRequest, regions) -> InferRequest:
    raw_contents = iter(msg.raw_input_contents) if len(msg.raw_input_contents) else None
    inputs = [_tensor(t, raw_contents, regions) for t in msg.inputs]
    outputs = [{"name": o.name, "parameters": proto_parameters(o.parameters)} for o in msg.outputs]
    return InferRequest(msg.id or None, inputs, outputs, proto_parameters(msg.parameters))


def response_to_proto(name: str, version: str, request_id: str | None, outputs: list[Output]) -> pb.ModelInferResponse:
    response = pb.ModelInferResponse(model_name=name, model_version=version, id=request_id or "")
    for out in outputs:
        response.outputs.add(name=out.name, datatype=out.datatype, shape=out.shape)
        if out.data is None:
            response.raw_output_contents.append(b"")
        elif out.datatype == "BYTES":
            response.raw_output_contents.append(join_bytes(out.data))
        else:
            response.raw_output_contents.append(np.ascontiguousarray(out.data).tobytes())
    return response


def stream_error(msg: pb.ModelInferRequest, message: str) -> pb.ModelStreamInferResponse:
    response = pb.ModelInferResponse(model_name=msg.model_name, model_version=msg.model_version, id=msg.id)
    return pb.ModelStreamInferResponse(error_message=message, infer_response=response)
