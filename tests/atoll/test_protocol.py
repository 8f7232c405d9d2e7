"""Protocol codec against the reference encoder/decoder of `tritonclient.http` (separate venv)."""

import json

import numpy as np
import pytest

from atoll.protocol import (HEADER_LENGTH, Output, ProtocolError, binary_outputs, decode_request,
                            encode_response, join_bytes, requested_outputs)
from tests.atoll.client_env import run_client

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
    (b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", None, "nests too deeply"),  # was a 500
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
