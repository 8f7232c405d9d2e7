"""Zoo builders: valid opset-17 ONNX that onnxruntime (the reference) runs with the declared I/O."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from gpu_runtime.zoo import MODELS, build
from gpu_runtime.zoo.repository import write_model

IMAGE_MODELS = ["mobilenet_v3_small", "squeezenet1_1"]


@pytest.mark.parametrize("name", IMAGE_MODELS)
def test_image_model_runs_in_onnxruntime_with_dynamic_batch(name):
    model = build(name)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((2, 3, 224, 224)).astype(np.float32)
    (y,) = sess.run(["logits"], {"input": x})
    assert y.shape == (2, 1000)
    assert np.isfinite(y).all() and y.std() > 1e-3


def test_builders_are_deterministic():
    a = build("squeezenet1_1", seed=3).SerializeToString()
    assert a == build("squeezenet1_1", seed=3).SerializeToString()
    assert a != build("squeezenet1_1", seed=4).SerializeToString()


def test_repository_layout(tmp_path):
    path = write_model(tmp_path, "mobilenet_v3_small", build("mobilenet_v3_small"))
    assert path == tmp_path / "mobilenet_v3_small" / "1" / "model.onnx"
    onnx.checker.check_model(str(path))
    config = (tmp_path / "mobilenet_v3_small" / "config.pbtxt").read_text()
    assert 'platform: "onnxruntime_onnx"' in config
    assert 'name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ]' in config
    assert 'key: "atoll.preprocess" value { string_value: "image" }' in config
    assert "dynamic_batching" in config and MODELS["mobilenet_v3_small"].max_batch_size > 1
