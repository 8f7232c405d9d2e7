"""The onnxruntime executor against NumPy arithmetic on a small graph built with onnx.helper."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpu_runtime.executors.ort_executor import OrtExecutor, default_providers
from tests.atoll.any_models import bf16_reference, brain


@pytest.fixture(scope="module")
def gemm_model(tmp_path_factory):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 10)).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["logits"]), helper.make_node("Softmax", ["logits"], ["p"])],
        "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    path = tmp_path_factory.mktemp("ort") / "gemm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path, w, b


def test_matches_numpy(gemm_model):
    path, w, b = gemm_model
    executor = OrtExecutor(path, intra_op_threads=1)
    assert executor.input_names == ["x"] and executor.output_names == ["p"]
    assert executor.preemptible is False and executor.name == "onnxruntime"
    for n in (1, 4, 33):
        x = np.random.default_rng(n).standard_normal((n, 32)).astype(np.float32)
        logits = x.astype(np.float64) @ w + b
        expected = np.exp(logits - logits.max(1, keepdims=True))
        expected /= expected.sum(1, keepdims=True)
        np.testing.assert_allclose(executor.run({"x": x})["p"], expected, rtol=1e-5, atol=1e-6)


def test_missing_input_is_named(gemm_model):
    with pytest.raises(KeyError, match="x"):
        OrtExecutor(gemm_model[0]).run({"y": np.zeros((1, 32), np.float32)})


def test_cpu_vgpu_uses_the_cpu_provider(gemm_model):
    assert default_providers("cpu") == ["CPUExecutionProvider"]
    assert default_providers("cuda")[-1] == "CPUExecutionProvider"
    assert OrtExecutor(gemm_model[0]).describe() == {
        "executor": "onnxruntime",
        "providers": ["CPUExecutionProvider"],
    }


def test_bf16_inputs_and_outputs_are_the_graphs_bits(tmp_path):
    """onnxruntime's binding takes no bfloat16 arrays; the executor's FP32 stand-ins give exactly
    what onnxruntime computes on buffers bound as BF16 tensors."""
    path = tmp_path / "brain.onnx"
    onnx.save(brain(), str(path))
    x = (np.random.default_rng(3).standard_normal((5, 8)) * 7).astype(ml_dtypes.bfloat16)
    y = OrtExecutor(path).run({"x": x})["y"]
    want = bf16_reference(brain(), {"x": x}, {"y": (5, 8)})["y"]
    assert y.dtype == ml_dtypes.bfloat16 and y.view(np.uint16).tolist() == want.view(np.uint16).tolist()
