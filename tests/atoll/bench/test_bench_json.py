"""The JSON bench's bodies and model, and the decode measurement on a small body."""

import json

import numpy as np
import onnxruntime as ort

from atoll.bench import json_decode
from atoll.bench.robust_json import WIDE, json_body, wide_model


def test_the_body_is_what_json_dumps_writes_and_the_wide_model_sums_it(tmp_path):
    body = json_body("x", [1, 7], 7)
    assert json.loads(body) == {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 7], "data": [0.5] * 7}]}
    wide_model(tmp_path, 7)
    session = ort.InferenceSession(str(tmp_path / WIDE / "1" / "model.onnx"))
    assert session.run(None, {"x": np.full((1, 7), 0.5, np.float32)})[0].tolist() == [[3.5]]
    assert 'dims: [ 7 ]' in (tmp_path / WIDE / "config.pbtxt").read_text()


def test_the_decode_measurement_compares_the_same_tensors(tmp_path):
    report = json_decode.main(["--mb", "0.05", "--out", str(tmp_path / "out.json")])
    assert set(report["results"]) == {"FP32 random", "FP32 0.5", "INT64", "BYTES"}
    assert all(row["same_tensor"] for row in report["results"].values())
    assert json.loads((tmp_path / "out.json").read_text()) == report
