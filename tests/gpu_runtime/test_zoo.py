"""Zoo builders: valid opset-17 ONNX that onnxruntime (the reference) runs with the declared I/O."""

from __future__ import annotations

import argparse
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from atoll.commands import zoo as zoo_cmd
from gpu_runtime.zoo import MODELS, build
from gpu_runtime.zoo.repository import write_model
from tests.gpu_runtime.zoo_cases import onnxruntime_outputs

IMAGE_MODELS = ["mobilenet_v3_small", "squeezenet1_1", "swin_t"]


@pytest.mark.parametrize("name", IMAGE_MODELS)
def test_image_model_runs_in_onnxruntime_with_dynamic_batch(name):
    x = np.random.default_rng(0).standard_normal((2, 3, 224, 224)).astype(np.float32)
    y = onnxruntime_outputs(name, {"input": x})["logits"]
    assert y.shape == (2, 1000)
    assert np.isfinite(y).all() and y.std() > 1e-3
    assert np.abs(y[0] - y[1]).max() > 1e-4  # the output depends on the input


@pytest.mark.parametrize("name,length,frames", [("conformer", 200, 49), ("conformer", 333, 82),
                                                ("citrinet", 200, 25), ("citrinet", 333, 42)])
def test_audio_model_has_dynamic_batch_and_length(name, length, frames):
    x = np.random.default_rng(0).standard_normal((3, 80, length)).astype(np.float32)
    y = onnxruntime_outputs(name, {"features": x})["log_probs"]
    vocab = MODELS[name].output_dims[-1]
    assert y.shape == (3, frames, vocab)
    np.testing.assert_allclose(np.exp(y).sum(-1), 1.0, rtol=1e-4)  # log-probabilities
    assert y.std() > 1e-2 and np.abs(y[0] - y[1]).max() > 1e-3


def test_zoo_cli_list_and_build(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    zoo_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["zoo", "list", "--json"])
    assert args.func(args) == 0
    assert [m["name"] for m in json.loads(capsys.readouterr().out)] == list(MODELS)
    args = parser.parse_args(["zoo", "build", "--out", str(tmp_path), "--models", "citrinet",
                              "--json"])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out)[0]["model"] == "citrinet"
    config = (tmp_path / "citrinet" / "config.pbtxt").read_text()
    assert 'dims: [ 80, -1 ]' in config and 'string_value: "audio"' in config
    args = parser.parse_args(["zoo", "build", "--out", str(tmp_path), "--models", "resnet"])
    assert args.func(args) == 2


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
