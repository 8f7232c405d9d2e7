"""A bounded mutation fuzz of what parses a client's bytes: the KServe v2 JSON body, the binary
tensor extension, gRPC ModelInferRequests, WAV/FLAC headers and data, and the media limits read
from JPEG and WAV headers.
Every mutation of a valid request must parse or fail with an error the server answers as the
client's (400-class), never with anything it would answer 500 or crash on; a request that parses
holds only well-typed values. Two kinds of mutation: bytes (flips, cuts, boundary values), and, for
JSON, values of the wrong type in every place of a valid document (what bytes rarely reach: an array
where an object belongs, an integer too large for its datatype, a lone surrogate). Seeded: the same
mutations on every run."""

from __future__ import annotations

import copy
import functools
import json
import struct

import numpy as np
import pytest
from fpga_host.status import PreprocessError
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from atoll.bench.corpus import jpeg_bytes, synthetic_wav
from atoll.config import PreprocessingConfig
from atoll.front_end.endpoints import Endpoints
from atoll.front_end.limits import MediaLimits
from atoll.front_end.media import read_wav
from atoll.front_end.rows import priority_of
from atoll.kserve.errors import ApiError, ErrorCode
from atoll.kserve.grpc_codec import request_from_proto
from atoll.kserve.protocol import DTYPES, HEADER_LENGTH, InferRequest, ProtocolError, decode_request
from atoll.kserve.shm_registry import Regions
from atoll.observe.metrics import Metrics
from atoll.repository.specs import ModelSpec, TensorSpec

MUTATIONS = 2000
SPEC = ModelSpec("m", "1", None, "onnxruntime_onnx", 8, [TensorSpec("x", "FP32", (2,))],
                 [TensorSpec("y", "FP32", (2,))], "none", "none")  # fmt: skip


def _client_error(exc: BaseException) -> bool:
    """What `endpoints.Endpoints.infer` answers with a 4xx while it runs a request (media, limits)."""
    if isinstance(exc, ApiError):
        return exc.code.http < 500
    return isinstance(exc, (ValueError, PreprocessError))  # ProtocolError and MediaError are ValueErrors


def _request_error(exc: BaseException) -> bool:
    """What `endpoints.Endpoints.infer` answers with a 4xx while it decodes and checks a request,
    before any work: a ProtocolError or a client's ApiError. Any other ValueError there (numpy's, say)
    is a 500."""
    return isinstance(exc, ProtocolError) or (isinstance(exc, ApiError) and exc.code.http < 500)


def _mutants(seed: int, data: bytes):
    """Bit flips, byte overwrites, cuts, duplicated and deleted spans, and boundary values."""
    rng = np.random.default_rng(seed)
    for _ in range(MUTATIONS):
        b = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            if not b:
                break
            i = int(rng.integers(0, len(b)))
            match int(rng.integers(0, 6)):
                case 0:
                    b[i] ^= 1 << int(rng.integers(0, 8))
                case 1:
                    b[i] = int(rng.choice([0, 0x7F, 0x80, 0xFF, ord("9"), ord('"'), ord("-")]))
                case 2:
                    del b[i:]
                case 3:
                    j = min(len(b), i + int(rng.integers(1, 16)))
                    b[i:i] = b[i:j]
                case 4:
                    del b[i:i + int(rng.integers(1, 16))]
                case 5:
                    b[i:i + 4] = struct.pack("<I", int(rng.choice([0, 1, 0x7FFFFFFF, 0xFFFFFFFF])))
        yield bytes(b)


class OneRegion(Regions):
    """The registered shared memory: a region "r" of 64 zero bytes."""

    def check(self, ref):
        if ref.region != "r":
            return super().check(ref)  # unknown: NOT_FOUND
        if ref.offset + ref.byte_size > 64:
            raise ApiError(ErrorCode.INVALID_ARG, "Invalid offset + byte size for shared memory region: 'r'")
        return self

    def read(self, ref):
        self.check(ref)
        return bytes(ref.byte_size)


@functools.cache
def _endpoints() -> Endpoints:
    return Endpoints(None, Metrics(), OneRegion())


def _checked(request: InferRequest) -> None:
    """The checks `Endpoints.infer` makes of a decoded request before any work, and what every later
    stage may then take for granted of it."""
    priority_of(SPEC, request.parameters)
    _endpoints()._wanted(SPEC, request)
    assert request.id is None or isinstance(request.id, str)
    assert isinstance(request.parameters, dict)
    for t in request.inputs:
        assert isinstance(t.name, str) and isinstance(t.parameters, dict), t
        assert t.data.dtype == DTYPES[t.datatype] and list(t.data.shape) == t.shape, t
        assert t.datatype != "BYTES" or all(isinstance(v, bytes) for v in t.data.flat), t
    for spec in request.outputs:
        assert isinstance(spec["name"], str) and isinstance(spec["parameters"], dict), spec


def _parse(body: bytes, header_length: int | None) -> None:
    _checked(decode_request(body, header_length, OneRegion()))


def _survives(parse, mutants, client_error=_request_error) -> int:
    """How many mutants parsed; raises on the first that fails as the server's fault."""
    parsed = 0
    for data in mutants:
        try:
            parse(data)
        except Exception as exc:  # noqa: BLE001 - the point: nothing but client errors may escape
            if not client_error(exc):
                raise AssertionError(f"{type(exc).__name__}: {exc} for {repr(data)[:200]}") from exc
        else:
            parsed += 1
    return parsed


JSON_DOC = {"id": "7", "parameters": {"priority": 1, "binary_data_output": False},
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [[1, 2], [3, 4.5]]},
                       {"name": "s", "datatype": "BYTES", "shape": [2], "data": ["a", "\u00e9"]},
                       {"name": "i", "datatype": "INT8", "shape": [2], "data": [-128, 127]},
                       {"name": "u", "datatype": "UINT64", "shape": [1], "data": [2**64 - 1]},
                       {"name": "b", "datatype": "BOOL", "shape": [1], "data": [True]}],
            "outputs": [{"name": "y", "parameters": {"classification": 1, "binary_data": False}}]}  # fmt: skip
BINARY_HEAD = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 2], "parameters": {"binary_data_size": 16}},
                          {"name": "w", "datatype": "BYTES", "shape": [2, 1], "parameters": {"binary_data_size": 12}}],
               "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}  # fmt: skip
BINARY_DATA = np.arange(4, dtype="<f4").tobytes() + struct.pack("<I", 3) + b"abc" + struct.pack("<I", 1) + b"z"
SHM_DOC = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "parameters": {
               "shared_memory_region": "r", "shared_memory_byte_size": 8, "shared_memory_offset": 0}}],
           "outputs": [{"name": "y", "parameters": {
               "shared_memory_region": "r", "shared_memory_byte_size": 8}}]}  # fmt: skip
# values of every JSON type, and the numbers and strings no datatype can hold
WRONG_VALUES = ([], [1], ["x"], [[1], 2], [True, None], {}, {"a": 1}, "", "x", "\ud800", True, False, None, 0, -1,
                1.5, 10**30, -(10**30), 10**400, 1e39, float("nan"), float("inf"))  # fmt: skip
TYPE_PAIRS = 800  # seeded random pairs of replacements, beyond each single one


def _places(doc, path=()):
    """The path to every value in `doc`, arrays and objects included."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        yield path + (key,)
        yield from _places(value, path + (key,))


def _at(doc, path):
    return functools.reduce(lambda node, key: node[key], path, doc)


def _replaced(doc, replacements):
    """A copy of `doc` with each (path, value) of `replacements` put in; a path ending in None
    appends the value to the array at the rest of the path."""
    doc = copy.deepcopy(doc)
    for path, value in sorted(replacements, key=lambda r: -len(r[0])):  # the deeper first: both stay
        *parents, last = path
        target = _at(doc, parents)
        if last is None:
            target.append(value)
        else:
            target[last] = value
    return doc


def _type_mutants(seed: int, doc):
    """`doc` with each of WRONG_VALUES in each place in turn and appended to each array, then seeded
    random pairs of such replacements (serialised as Python's json does: NaN, Infinity, escapes)."""
    places = list(_places(doc))
    places += [path + (None,) for path in places if isinstance(_at(doc, path), list)]
    for path in places:
        for value in WRONG_VALUES:
            yield json.dumps(_replaced(doc, [(path, value)])).encode()
    rng = np.random.default_rng(seed)
    for _ in range(TYPE_PAIRS):
        a, b = rng.choice(len(places), 2, replace=False)
        if places[a][: len(places[b])] == places[b] or places[b][: len(places[a])] == places[a]:
            continue  # one inside the other: the single replacements had it
        values = rng.choice(len(WRONG_VALUES), 2)
        yield json.dumps(_replaced(doc, [(places[a], WRONG_VALUES[values[0]]),
                                         (places[b], WRONG_VALUES[values[1]])])).encode()  # fmt: skip


def test_json_bodies():
    body = json.dumps({"id": "7", "parameters": {"priority": 1},
                       "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [1, 2, 3, 4]}],
                       "outputs": [{"name": "y", "parameters": {"classification": 1}}]}).encode()  # fmt: skip
    assert _survives(lambda d: _parse(d, None), _mutants(1, body)) > 0


@pytest.mark.parametrize("doc, raw", [(JSON_DOC, b""), (BINARY_HEAD, BINARY_DATA), (SHM_DOC, b"")],
                         ids=["json", "binary", "shared-memory"])
def test_json_values_of_the_wrong_type(doc, raw):
    """Every place of a valid request holding a value of another type (or one too large for its
    datatype), one place at a time and in pairs: a client error, or a request of well-typed values."""
    head = json.dumps(doc).encode()
    _parse(head + raw, len(head) if raw else None)  # unmutated, it parses
    mutants = list(_type_mutants(6, doc))
    assert len(mutants) > 1000
    parse = (lambda d: _parse(d + raw, len(d))) if raw else (lambda d: _parse(d, None))
    assert _survives(parse, mutants) > 0


@pytest.mark.parametrize("datatype, raw", [("FP32", np.arange(4, dtype="<f4").tobytes()),
                                           ("BYTES", struct.pack("<I", 3) + b"abc" + struct.pack("<I", 1) + b"z")])
def test_binary_extension_bodies(datatype, raw):
    head = json.dumps({"inputs": [{"name": "x", "datatype": datatype, "shape": [2, 1] if datatype == "BYTES" else [2, 2],
                                   "parameters": {"binary_data_size": len(raw)}}],
                       "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}).encode()  # fmt: skip
    body = head + raw
    # the header length travels in an HTTP header: mutate it as well as the body
    assert _survives(lambda d: _parse(d, len(head)), _mutants(2, body)) > 0
    for length in (0, 1, len(head) - 1, len(head) + 1, len(body), len(body) + 1, -1):
        try:
            _parse(body, length)
        except Exception as exc:  # noqa: BLE001
            assert _request_error(exc), f"{HEADER_LENGTH}={length}: {exc!r}"


def test_wav_files_and_their_limits():
    wav = synthetic_wav(np.random.default_rng(3), 0.5)
    limits = MediaLimits.of(PreprocessingConfig())

    def parse(data: bytes) -> None:
        limits.check("audio", [data])
        pcm, rate = read_wav(data, limits.max_clip_seconds)
        assert pcm.ndim == 1 and pcm.dtype == np.float32 and rate > 0

    assert _survives(parse, _mutants(4, wav), _client_error) > 0


def test_jpeg_headers_and_their_limits():
    limits = MediaLimits.of(PreprocessingConfig())
    assert _survives(lambda d: limits.check("image", [d]), _mutants(5, jpeg_bytes(48, 32)), _client_error) > 0


def _grpc_mutants(seed: int):
    """ModelInferRequests that protobuf accepts but whose fields are off: byte-level mutants (of
    those, the ones protobuf still parses) and messages built with random field values."""

    rng = np.random.default_rng(seed)
    valid = pb.ModelInferRequest(model_name="m", id="7")
    valid.parameters["priority"].int64_param = 1
    valid.inputs.add(name="x", datatype="FP32", shape=[2, 2]).contents.fp32_contents.extend([1, 2, 3, 4])
    valid.inputs.add(name="w", datatype="BYTES", shape=[2])
    valid.raw_input_contents.append(struct.pack("<I", 3) + b"abc" + struct.pack("<I", 1) + b"z")
    valid.outputs.add(name="y").parameters["classification"].int64_param = 1
    for data in _mutants(seed, valid.SerializeToString()):
        try:
            yield pb.ModelInferRequest.FromString(data)
        except DecodeError:  # grpcio answers these itself, before our code (INTERNAL, as gRPC servers do)
            continue
    pick = lambda *choices: choices[int(rng.integers(0, len(choices)))]  # noqa: E731
    for _ in range(MUTATIONS):
        msg = pb.ModelInferRequest(model_name="m", id=pick("", "7", "\x00"))
        for key in rng.choice(["priority", "timeout", "binary_data_output", "x"], int(rng.integers(0, 3))):
            param = msg.parameters[str(key)]
            kind = pick("int64_param", "bool_param", "string_param", "double_param", "uint64_param")
            setattr(param, kind, {"int64_param": int(rng.integers(-2, 3)), "bool_param": True, "string_param": "1",
                                  "double_param": 1.5, "uint64_param": 2**63}[kind])  # fmt: skip
        for _ in range(int(rng.integers(0, 3))):
            shape = [int(v) for v in rng.integers(-2, 4, int(rng.integers(0, 3)))]
            t = msg.inputs.add(name=pick("x", "w", ""),
                               datatype=pick("FP32", "BYTES", "INT8", "UINT8", "BOOL", "FP16", "X"),
                               shape=pick(shape, shape, shape, [1] * 70, [-1, -1], [2**62, 2**62, 0]))  # fmt: skip
            match pick("raw", "typed", "shm", "none"):
                case "raw":
                    msg.raw_input_contents.append(rng.bytes(int(rng.integers(0, 24))))
                case "typed":
                    t.contents.fp32_contents.extend(rng.random(int(rng.integers(0, 5))).tolist())
                    t.contents.bytes_contents.extend([b"a"] * int(rng.integers(0, 3)))
                    t.contents.bool_contents.extend([True] * int(rng.integers(0, 3)))
                    t.contents.int_contents.extend(pick([], [1], [300], [-1000, 1]))  # INT8's range is narrower
                    t.contents.uint_contents.extend(pick([], [1], [256]))
                case "shm":
                    t.parameters["shared_memory_region"].string_param = pick("r", "")
                    t.parameters["shared_memory_byte_size"].int64_param = int(rng.integers(-1, 64))
        for _ in range(int(rng.integers(0, 2))):
            out = msg.outputs.add(name=pick("y", "z"))
            param = out.parameters[pick("classification", "binary_data", "shared_memory_region")]
            kind = pick("int64_param", "bool_param", "string_param")
            setattr(param, kind, {"int64_param": int(rng.integers(-1, 3)), "bool_param": True, "string_param": "y"}[kind])
        yield msg


def test_grpc_infer_requests():
    """What `grpc_codec.request_from_proto` and the checks after it make of ModelInferRequests
    with fields no client should send."""

    def parse(msg) -> None:
        _checked(request_from_proto(msg, OneRegion()))

    assert _survives(parse, _grpc_mutants(5)) > 0
