"""`atoll bench models` on a one-model Triton-layout repository built with onnx.helper."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from atoll.cli import main

pytestmark = pytest.mark.timeout(120)

CONFIG = """name: "tiny"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 8, -1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 8, -1 ] } ]
"""


@pytest.fixture
def repository(tmp_path):
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["w", "x"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, "T"])],
        [numpy_helper.from_array(w, "w")],
    )
    (tmp_path / "repo" / "tiny" / "1").mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "repo" / "tiny" / "1" / "model.onnx")
    (tmp_path / "repo" / "tiny" / "config.pbtxt").write_text(CONFIG)
    return tmp_path / "repo"


def test_bench_models_json(repository, tmp_path, capsys):
    out = tmp_path / "results" / "models.json"
    code = main(["bench", "models", "--repository", str(repository), "--batches", "1,2,8",
                 "--lengths", "5,7", "--repeats", "2", "--warmup", "1", "--vgpu-mode", "cpu",
                 "--compare", "onnxruntime-cpu", "--json", "--out", str(out)])  # fmt: skip
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == json.loads(out.read_text())
    assert doc["executor"] == "onnxruntime" and doc["vgpu"]["id"] == "cpu0"
    assert doc["device"]["cpu"] and doc["versions"]["onnxruntime"]
    points = [(r["model"], r["batch"], r["length"]) for r in doc["results"]]
    assert points == [("tiny", 1, 5), ("tiny", 1, 7), ("tiny", 2, 5), ("tiny", 2, 7)]
    for r in doc["results"]:
        assert 0 < r["compute_ms"]["p50"] <= r["latency_ms"]["p50"]
        assert r["latency_ms"]["p50"] <= r["latency_ms"]["p95"]
        assert r["throughput_items_s"] == pytest.approx(r["batch"] * 1e3 / r["latency_ms"]["p50"], rel=1e-3)
        assert r["compare"]["latency_ms"]["p50"] > 0
    assert {s["batch"] for s in doc["skipped"]} == {8}  # above max_batch_size 4


def test_gpu_compare_without_cuda_is_skipped_with_a_reason(repository, capsys):
    code = main(["bench", "models", "--repository", str(repository), "--batches", "1",
                 "--repeats", "1", "--warmup", "0", "--vgpu-mode", "cpu",
                 "--compare", "onnxruntime-gpu", "--json"])  # fmt: skip
    assert code == 0
    doc = json.loads(capsys.readouterr().out)

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        assert "CUDAExecutionProvider" in doc["compare"]["skipped"]
        assert all("compare" not in r for r in doc["results"])


def test_user_mistakes_are_one_line_errors(repository, capsys):
    assert main(["bench", "models", "--repository", str(repository), "--models", "nope"]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["bench", "models", "--repository", str(repository / "missing")]) == 2
    assert "not found" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="positive"):
        main(["bench", "models", "--repository", str(repository), "--batches", "0"])
