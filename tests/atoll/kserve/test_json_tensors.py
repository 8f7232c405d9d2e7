"""JSON tensors decoded straight into arrays: the same tensors and answers as the binary extension,
for every datatype; slices and prefixes."""

import json

import ml_dtypes
import numpy as np
import pytest

from atoll.kserve import json_tensors
from atoll.kserve.datatypes import DTYPES, ProtocolError
from atoll.kserve.json_tensors import (
    Incomplete,
    Skeleton,
    json_values,
    skeleton,
    sliced_sync,
)
from atoll.kserve.protocol import (
    HEADER_LENGTH,
    Output,
    decode_request,
    decoding,
    encode_response,
    join_bytes,
)

RNG = np.random.default_rng(7)


def _sample(datatype: str) -> np.ndarray:
    """Values across the datatype's range, edges included, shaped (2, 3, 4)."""
    if datatype == "BYTES":
        words = ["", "a", "é", 'q"uo]te[', "back\\slash", "tab\t", "\u2603" * 3]
        return np.array([w.encode() for w in RNG.choice(words, 24)], dtype=object).reshape(2, 3, 4)
    dt = DTYPES[datatype]
    if datatype == "BOOL":
        return RNG.integers(0, 2, 24).astype(bool).reshape(2, 3, 4)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        edges = np.array([info.min, info.max, 0, 1], dt)
        return np.concatenate([edges, RNG.integers(info.min, info.max, 20, dtype=dt, endpoint=True)]).reshape(2, 3, 4)
    values = RNG.standard_normal(20) * 10.0 ** RNG.integers(-5, 5, 20)
    edges = np.array([np.nan, np.inf, -np.inf, 0.0])
    return np.concatenate([edges, values]).astype(dt).reshape(2, 3, 4)


def _as_json(array: np.ndarray, datatype: str) -> list:
    """What a client's json.dumps writes (tritonclient's binary_data=False: each element as a Python value)."""
    if datatype == "BYTES":
        return [b.decode() for b in array.reshape(-1)]
    if datatype == "BF16":
        array = array.astype(np.float32)
    return array.tolist()


def _bodies(array: np.ndarray, datatype: str) -> tuple[bytes, tuple[bytes, int]]:
    spec = {"name": "x", "datatype": datatype, "shape": list(array.shape)}
    as_json = json.dumps({"inputs": [{**spec, "data": _as_json(array, datatype)}]}).encode()
    blob = join_bytes(array) if datatype == "BYTES" else array.tobytes()
    header = json.dumps({"inputs": [{**spec, "parameters": {"binary_data_size": len(blob)}}]}).encode()
    return as_json, (header + blob, len(header))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype == object:
        return a.shape == b.shape and a.tolist() == b.tolist()
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()  # NaNs too


@pytest.mark.parametrize("datatype", list(DTYPES))
def test_json_and_binary_requests_decode_to_the_same_tensor(datatype):
    array = _sample(datatype)
    as_json, (binary, header_length) = _bodies(array, datatype)
    from_json = decode_request(as_json).inputs[0].data
    from_binary = decode_request(binary, header_length).inputs[0].data
    assert _same(from_json, from_binary) and _same(from_json, array)


@pytest.mark.parametrize("datatype", [d for d in DTYPES if d != "BYTES"])
def test_json_and_binary_answers_carry_the_same_values(datatype):
    array = _sample(datatype)
    as_json, _ = encode_response("m", "1", None, [Output.of("y", array)], set())
    binary, headers = encode_response("m", "1", None, [Output.of("y", array)], {"y"})
    spec = json.loads(as_json)["outputs"][0]
    assert spec["datatype"] == datatype and spec["shape"] == [2, 3, 4]
    read_back = np.array(spec["data"], dtype=np.float64 if datatype == "BF16" else DTYPES[datatype])
    blob = binary[int(headers[HEADER_LENGTH]) :]
    assert _same(read_back.astype(DTYPES[datatype]).reshape(2, 3, 4), np.frombuffer(blob, DTYPES[datatype]).reshape(2, 3, 4))


def test_nested_and_flat_data_give_the_same_tensor_whatever_the_slice(monkeypatch):
    array = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
    nested = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 3, 4], "data": array.tolist()}]})
    flat = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 3, 4], "data": array.reshape(-1).tolist()}]})
    monkeypatch.setattr(json_tensors, "SLICE_BYTES", 5)
    steps = decoding(nested.encode())
    pauses = 0
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            request = stop.value
            break
        pauses += 1
    assert pauses > len(nested) // 5 // 2  # the body was walked and parsed a few bytes at a time
    assert _same(request.inputs[0].data, array) and _same(decode_request(flat.encode()).inputs[0].data, array)


def test_strings_with_quotes_brackets_and_escapes_split_across_slices(monkeypatch):
    words = ['a]"[', "\\", '\\"', "]]]", "[", "\\\\\\"]
    body = json.dumps({"inputs": [{"name": "s", "datatype": "BYTES", "shape": [6], "data": words},
                                  {"name": "n", "datatype": "INT8", "shape": [1], "data": [[5]]}]}).encode()  # fmt: skip
    for size in (1, 2, 3, 5, 64):
        monkeypatch.setattr(json_tensors, "SLICE_BYTES", size)
        monkeypatch.setattr(json_tensors, "STRING_SLICE_BYTES", size)
        s, n = decode_request(body).inputs
        assert s.data.tolist() == [w.encode() for w in words] and n.data.tolist() == [5]


def test_a_prefix_tells_the_fields_that_precede_each_data():
    body = json.dumps({"id": "7", "inputs": [
        {"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [0.5] * 1000},
        {"name": "y", "shape": [2], "datatype": "INT8", "data": [1, 2]}]}).encode()  # fmt: skip
    with pytest.raises(Incomplete) as info:
        sliced_sync(skeleton(body[:200], complete=False))
    seen: Skeleton = info.value.args[0]
    assert seen.fields == {"id": "7"}
    assert seen.inputs == [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": None}]


def test_a_check_sees_every_input_before_any_data_is_parsed():
    """And what they will cost decoded."""
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [3], "data": ["not", "numbers", 1]},
                                  {"name": "y", "datatype": "INT8", "shape": [1], "data": [1]}]}).encode()  # fmt: skip
    seen = []

    def check(skeleton_, heads):
        seen.extend((head.name, head.datatype, head.shape) for head in heads)
        raise ProtocolError("y refused")

    with pytest.raises(ProtocolError, match="y refused"):  # not "data is not an array of FP32 values"
        sliced_sync(decoding(body, check=check))
    assert seen == [("x", "FP32", [3]), ("y", "INT8", [1])]
    assert json_tensors.decoded_bytes("FP32", 3, json_tensors.Span(0, 20)) == 12


@pytest.mark.parametrize("data, match", [
    ("[1,2]", "2 values for shape"),
    ("[1,2,3,4]", "more than 3 values"),
    ("[1,,2,3]", "not an array of FP32"),
    ("[1 2 3]", "not an array of FP32"),
    ('[1,"2",3]', "not an array of FP32"),
    ("[1,2,3", "not valid JSON"),
    ("[1,NaNa,3]", "not an array of FP32"),
    ("[1,100000000000000000000000000000000000000000,3]", "outside the range of FP32"),
])  # fmt: skip
def test_malformed_number_runs_are_refused(data, match):
    body = b'{"inputs":[{"name":"x","datatype":"FP32","shape":[3],"data":' + data.encode() + b"}]}"
    with pytest.raises(ProtocolError, match=match):
        decode_request(body)


def test_big_integers_and_literals_of_float_data_read_as_json_loads_reads_them():
    body = b'{"inputs":[{"name":"x","datatype":"FP64","shape":[4],"data":[1e3,NaN,-Infinity,' + b"1" + b"0" * 30 + b"]}]}"
    got = decode_request(body).inputs[0].data
    assert np.array_equal(got, np.array(json.loads(body)["inputs"][0]["data"], np.float64), equal_nan=True)


def test_outputs_are_written_as_python_writes_them():
    values = np.array([0.1, 1e-45, 3.4028235e38, np.nan, -np.inf, -0.0], np.float32)
    assert json.loads(json_values(values), parse_constant=float) is not None
    assert np.array_equal(np.array(json.loads(json_values(values)), np.float32), values, equal_nan=True)
    assert json_values(np.array([[True], [False]])) == b"[true,false]"
    assert json_values(np.array([1.5, -2], ml_dtypes.bfloat16)) == b"[1.5,-2.0]"
    assert json_values(np.array([2**64 - 1], np.uint64)) == b"[18446744073709551615]"


@pytest.mark.parametrize("doc, match", [
    ({"inputs": [{"name": "x", "datatype": "INT8", "shape": [1], "data": [1]}] * 4097}, "more than 4096 inputs"),
    ({"inputs": [], **{f"k{i}": i for i in range(300)}}, "more than 256 fields"),
    ({"inputs": [{"name": "x", **{f"k{i}": i for i in range(300)}}]}, "more than 256 fields"),
    ('{"inputs":' + " " * 70_000 + "[]}", "over 64 KiB of whitespace"),
])  # fmt: skip
def test_a_body_of_countless_tiny_fields_is_refused_before_it_costs_its_size_many_times(doc, match):
    with pytest.raises(ProtocolError, match=match):
        decode_request((doc if isinstance(doc, str) else json.dumps(doc)).encode())


def test_keys_with_escapes_read_as_json_reads_them():
    body = b'{"inputs":[{"n\\u0061me":"x","datatype":"INT8","shape":[1],"data":[1]}],"i\\"d":"q"}'
    assert decode_request(body).inputs[0].name == "x"


@pytest.mark.parametrize("header", [
    b'{"inputs":[{"name":"IMAGE","datatype":"BYTES","shape":[1,1],"parameters":{"binary_data_size":9}}],'
    b'"parameters":{"binary_data_output":true,"priority":1},"id":"7"}',
    b' {"id": "x", "outputs": [{"name": "probs"}]} ',
    b'{"inputs": [], "parameters": {}}',
])
def test_a_small_header_parsed_at_once_is_the_walks_skeleton(monkeypatch, header):
    fast = sliced_sync(skeleton(header + b"binary data", True, len(header)))
    monkeypatch.setattr(json_tensors, "SMALL_HEADER_BYTES", 0)  # the walk only
    walked = sliced_sync(skeleton(header + b"binary data", True, len(header)))
    assert (fast.fields, fast.inputs) == (walked.fields, walked.inputs)


@pytest.mark.parametrize("header", [
    b'[1, 2]',  # not an object
    b'{"inputs": [1]}',  # an input that is not an object
    b'{"inputs": [{"name": "x"}]} trailing',  # not JSON
    b'{"inputs": {"name": "x"}}',  # inputs not a list
    '{"id": "\u00e9"}'.encode("utf-16"),  # not UTF-8
])
def test_whatever_a_small_header_does_not_fit_is_judged_by_the_walk(monkeypatch, header):
    def outcome():
        try:
            s = sliced_sync(skeleton(header, True))
            return s.fields, s.inputs
        except ProtocolError as e:
            return str(e)

    fast = outcome()
    monkeypatch.setattr(json_tensors, "SMALL_HEADER_BYTES", 0)
    assert fast == outcome()


def test_a_small_body_with_data_keeps_its_span():
    body = b'{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[1.5,2]}]}'
    s = sliced_sync(skeleton(body, True))
    span = s.inputs[0]["data"]
    assert body[span.start:span.end] == b"[1.5,2]"
