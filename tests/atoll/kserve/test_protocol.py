"""Protocol codec against the reference encoder/decoder of `tritonclient.http` (separate venv)."""

import json
import struct

import numpy as np
import pytest
from tests.atoll.client_env import run_client

from atoll.kserve.protocol import (
    HEADER_LENGTH,
    Output,
    ProtocolError,
    binary_outputs,
    decode_request,
    encode_response,
    join_bytes,
    requested_outputs,
)

MAKE_REQUEST = r"""
import sys, numpy as np, tritonclient.http as h
jpeg = np.array([b"\xff\xd8first", b"", b"third\x00\xff"], dtype=object).reshape(3, 1)
x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
a = h.InferInput("image", [3, 1], "BYTES"); a.set_data_from_numpy(jpeg, binary_data=True)
b = h.InferInput("input", [2, 3, 4], "FP32"); b.set_data_from_numpy(x, binary_data=True)
c = h.InferInput("ids", [2], "INT64"); c.set_data_from_numpy(np.array([5, -9]), binary_data=False)
outs = [h.InferRequestedOutput("logits", binary_data=True), h.InferRequestedOutput("names", binary_data=False)]
body, json_size = h.InferenceServerClient.generate_request_body([a, b, c], outs, request_id="r7")
open(sys.argv[1], "wb").write(body)
print(json_size if json_size is not None else -1)
"""

PARSE_RESPONSE = r"""
import sys, json, numpy as np, tritonclient.http as h
body = open(sys.argv[1], "rb").read()
header = int(sys.argv[2]) if sys.argv[2] != "-" else None
r = h.InferenceServerClient.parse_response_body(body, header_length=header)
logits = r.as_numpy("logits"); names = r.as_numpy("names")
print(json.dumps({"id": r.get_response()["id"], "logits": logits.tolist(), "dtype": str(logits.dtype),
                  "names": [n.decode() if isinstance(n, bytes) else n for n in names.reshape(-1)]}))
"""


def test_decodes_what_tritonclient_sends(tmp_path):
    path = tmp_path / "request.bin"
    header = int(run_client(MAKE_REQUEST, str(path)))
    req = decode_request(path.read_bytes(), header)
    assert req.id == "r7"
    image, x, ids = req.inputs
    assert image.datatype == "BYTES" and image.data.shape == (3, 1)
    assert list(image.data.reshape(-1)) == [b"\xff\xd8first", b"", b"third\x00\xff"]
    np.testing.assert_array_equal(x.data, np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7)
    assert ids.data.dtype == np.int64 and ids.data.tolist() == [5, -9]
    wanted = requested_outputs(req, ["names", "logits"])
    assert [name for name, _ in wanted] == ["logits", "names"]
    outputs = [Output.of(name, np.zeros(1, np.float32), params) for name, params in wanted]
    assert binary_outputs(req, outputs) == {"logits"}


def test_tritonclient_parses_our_response(tmp_path):
    logits = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    names = np.array([b"cat", b"dog"], dtype=object)
    body, headers = encode_response("m", "1", "r9", [Output.of("logits", logits), Output.of("names", names)],
                                    {"logits"})
    path = tmp_path / "response.bin"
    path.write_bytes(body)
    out = json.loads(run_client(PARSE_RESPONSE, str(path), headers.get(HEADER_LENGTH, "-")))
    assert out["id"] == "r9" and out["dtype"] == "float32"
    np.testing.assert_array_equal(np.array(out["logits"], dtype=np.float32), logits)
    assert out["names"] == ["cat", "dog"]


def test_json_only_round_trip():
    body = json.dumps({"inputs": [
        {"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [[1, 2], [3, 4.5]]},
        {"name": "s", "datatype": "BYTES", "shape": [1], "data": ["héllo"]}]}).encode()
    req = decode_request(body)
    assert req.inputs[0].data.tolist() == [[1.0, 2.0], [3.0, 4.5]]
    assert req.inputs[1].data[0] == "héllo".encode()
    payload, headers = encode_response("m", "1", None, [Output.of("y", req.inputs[0].data * 2)], set())
    assert headers["Content-Type"] == "application/json"
    assert json.loads(payload)["outputs"][0] == {"name": "y", "datatype": "FP32", "shape": [2, 2],
                                                 "data": [2.0, 4.0, 6.0, 9.0]}


@pytest.mark.parametrize("body, header, match", [
    (b"{not json", None, "not valid JSON"),
    (b"[]", None, "must be a JSON object"),
    (b'{"parameters": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", None, "nests too deeply"),  # was a 500
    (json.dumps({"inputs": [{"name": "x", "datatype": "FP99", "shape": [1], "data": [1]}]}).encode(),
     None, "unknown datatype"),
    (json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [3], "data": [1, 2]}]}).encode(),
     None, "2 values for shape"),
    (json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2],
                             "parameters": {"binary_data_size": 8}}]}).encode(), None, "exceeds"),
])
def test_malformed_requests(body, header, match):
    with pytest.raises(ProtocolError, match=match):
        decode_request(body, header)


def test_truncated_bytes_element():
    head = json.dumps({"inputs": [{"name": "f", "datatype": "BYTES", "shape": [1],
                                   "parameters": {"binary_data_size": 6}}]}).encode()
    blob = join_bytes(np.array([b"abcdef"], dtype=object))[:6]  # length says 6, only 2 follow
    with pytest.raises(ProtocolError, match="runs past"):
        decode_request(head + blob, len(head))


def _input(**fields) -> dict:
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1, 2], **fields}]}


# Each was a 500 with a traceback (AttributeError, TypeError, ValueError, OverflowError from numpy or
# bytes()), or, for a number as a BYTES element, a buffer of that many zero bytes.
@pytest.mark.parametrize("doc, match", [
    ({**_input(), "parameters": [1]}, "request parameters must be a JSON object, got an array"),
    ({**_input(), "parameters": "abc"}, "request parameters must be a JSON object, got a string"),
    ({**_input(), "id": {"a": 1}}, "request id must be a string, got an object"),
    (_input(parameters=[1]), "input 'x': parameters must be a JSON object, got an array"),
    (_input(parameters="zz"), "input 'x': parameters must be a JSON object"),
    (_input(name={"a": 1}), "an input's name must be a string, got an object"),
    (_input(name=[1]), "an input's name must be a string, got an array"),
    (_input(datatype=["BYTES"]), "input 'x': datatype must be a string, got an array"),
    (_input(shape=[True, True]), "input 'x': shape must be a list of at most 32 non-negative integers"),
    (_input(shape=[1] * 100, data=[1]), "shape must be a list of at most 32"),
    (_input(shape=[0, 10**30], data=[]), r"shape \[0, 10+\] has too many elements"),
    (_input(data="ab"), "input 'x': data must be an array, got a string"),
    (_input(data=[[1, 2], [3]]), "input 'x': more than 2 values for shape"),  # flattened, as Triton does
    (_input(data=[1, {}]), "data is not an array of FP32 values"),
    (_input(datatype="BYTES", data=["a", -1]), "input 'x': BYTES data must be strings, got -1"),
    (_input(datatype="BYTES", data=["a", 300_000_000]), "BYTES data must be strings, got 300000000"),
    (_input(datatype="BYTES", data=["a", 10**15]), "BYTES data must be strings, got 1000000000000000"),
    (_input(datatype="BYTES", data=["a", 1.5]), "BYTES data must be strings, got 1.5"),
    (_input(datatype="BYTES", data=["a", None]), "BYTES data must be strings, got null"),
    (_input(datatype="BYTES", data=["a", {}]), "BYTES data must be strings, got an object"),
    (_input(datatype="BYTES", data=["a", "\ud800"]), "input 'x': BYTES data holds a string that is not Unicode"),
    (_input(data=[1, 10**400]), "input 'x': a value is outside the range of FP32"),
    (_input(data=[1, 1e39]), "a value is outside the range of FP32"),  # would be infinity
    (_input(datatype="FP16", data=[1, 1e10]), "a value is outside the range of FP16"),
    (_input(datatype="FP64", data=[1, 10**400]), "a value is outside the range of FP64"),
    (_input(datatype="INT64", data=[1, 10**30]), "a value is outside the range of INT64"),
    (_input(datatype="UINT8", data=[1, 300]), "input 'x': a value is outside the range of UINT8"),
    (_input(datatype="UINT8", data=[1, -1]), "a value is outside the range of UINT8"),
    (_input(datatype="INT8", data=[-1000, 1]), "a value is outside the range of INT8"),
    (_input(datatype="INT32", data=[1, float("inf")]), "a value is outside the range of INT32"),
    (_input(datatype="BOOL", data=["false", True]), "input 'x': BOOL data must be true or false"),
    (_input(datatype="BOOL", data=[0, 1]), "BOOL data must be true or false"),
    ({**_input(), "outputs": 5}, "outputs must be an array, got 5"),
    ({**_input(), "outputs": "abc"}, "outputs must be an array, got a string"),
    ({**_input(), "outputs": [[1]]}, "each requested output must be a JSON object, got an array"),
    ({**_input(), "outputs": [{"name": [1]}]}, "a requested output's name must be a string, got an array"),
    ({**_input(), "outputs": [{"name": "y", "parameters": [1]}]}, "output 'y': parameters must be a JSON object"),
    ({**_input(), "outputs": [{"name": "y", "parameters": "x"}]}, "output 'y': parameters must be a JSON object"),
    ({"inputs": [1, 2]}, "each input must be a JSON object, got 1"),
    (_input(parameters={"shared_memory_region": "r", "shared_memory_byte_size": True}), "bad shared-memory"),
])  # fmt: skip
def test_values_of_the_wrong_type_or_range_are_refused_with_a_reason(doc, match):
    with pytest.raises(ProtocolError, match=match) as info:
        decode_request(json.dumps(doc).encode())
    assert "{'" not in str(info.value) and "<" not in str(info.value)  # no Python repr of what was sent


@pytest.mark.parametrize("size", ["8", 1.5, -4, True])
def test_binary_data_size_must_be_a_non_negative_integer(size):
    head = json.dumps({"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1],
                                   "parameters": {"binary_data_size": size}}]}).encode()  # fmt: skip
    with pytest.raises(ProtocolError, match="input 'x': binary_data_size must be a non-negative integer"):
        decode_request(head + struct.pack("<I", 4) + b"abcd", len(head))


def test_values_at_the_edges_of_their_datatype_are_taken():
    doc = {"inputs": [{"name": "f", "datatype": "FP32", "shape": [2, 2],
                       "data": [[1, 3e38], [float("inf"), float("nan")]]},
                      {"name": "u", "datatype": "UINT64", "shape": [2], "data": [1, 2**64 - 1]},
                      {"name": "i", "datatype": "INT8", "shape": [2], "data": [-128, 127]},
                      {"name": "b", "datatype": "BOOL", "shape": [2, 1], "data": [[True], [False]]},
                      {"name": "s", "datatype": "BYTES", "shape": [2, 1], "data": [["a"], ["é"]]},
                      {"name": "e", "datatype": "UINT8", "shape": [0, 3], "data": []}],
           "outputs": [{"name": "y"}], "parameters": None}  # fmt: skip
    f, u, i, b, s, e = decode_request(json.dumps(doc).encode()).inputs  # Infinity, NaN: Python's json literals
    assert f.data[0, 1] == np.float32(3e38) and np.isinf(f.data[1, 0]) and np.isnan(f.data[1, 1])
    assert u.data.dtype == np.uint64 and u.data.tolist() == [1, 2**64 - 1] and i.data.tolist() == [-128, 127]
    assert b.data.tolist() == [[True], [False]] and s.data.tolist() == [[b"a"], ["é".encode()]]
    assert e.data.shape == (0, 3) and e.data.dtype == np.uint8
    assert requested_outputs(decode_request(json.dumps(doc).encode()), ["y"]) == [("y", {})]
