"""The PyTorch-eager comparison runner of `atoll bench models` against onnxruntime (the reference)
on every zoo model. PyTorch is not an Atoll dependency: it exists on the GPU machines this runs on."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from gpu_runtime.zoo import MODELS, build

from atoll.bench.torch_eager import TorchEagerModel


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(MODELS))
def test_torch_eager_matches_onnxruntime(name, tmp_path):
    pytest.importorskip("torch")


    path = tmp_path / f"{name}.onnx"
    onnx.save(build(name), str(path))
    entry = MODELS[name]
    dims = [d if d != -1 else 200 for d in entry.input_dims]
    x = np.random.default_rng(0).normal(size=(2, *dims)).astype(np.float32)
    want = ort.InferenceSession(str(path)).run(None, {entry.input_name: x})[0]
    got = TorchEagerModel(str(path), "cuda")({entry.input_name: x})[entry.output_name]
    got = got.float().cpu().numpy()
    assert got.shape == want.shape
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 1e-3 * scale  # TF32 is off by default for convs? keep margin
