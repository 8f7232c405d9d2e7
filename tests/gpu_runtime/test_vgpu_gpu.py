"""vGPUs on a real NVIDIA GPU (@pytest.mark.gpu, skipped elsewhere): NVML discovery, green-context
partitions, and the cupy executor in worker processes (rows in slot arenas, `row_runs`) against
onnxruntime on CPU (the reference)."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpu_runtime.vgpu.discovery import discover
from gpu_runtime.vgpu.pool import WorkerPool
from tests.gpu_runtime.row_runs import RowModel

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]

needs_cuda_python = pytest.mark.skipif(
    importlib.util.find_spec("cuda") is None, reason="cuda-python not installed (green contexts)"
)


@pytest.fixture(scope="module")
def conv(tmp_path_factory):
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 16, 16])],
        [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")],
    )  # fmt: skip
    path = tmp_path_factory.mktemp("gpu") / "conv.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)
    return str(path)


def test_discovery_reports_the_gpus():
    found = discover("auto")
    assert found.vgpus and found.vgpus[0].kind in ("mig", "gpu")
    for v in found.vgpus:
        assert v.uuid.startswith(("MIG-", "GPU-")) and v.env == {"CUDA_VISIBLE_DEVICES": v.uuid}
        assert v.memory_bytes > 0 and v.profile_kind
    if found.vgpus[0].kind == "gpu":
        assert "mig" in found.absent


@needs_cuda_python
def test_green_context_partitions_split_the_sms():
    whole = discover("gpu").vgpus
    parts = discover("gpu", green_context_sms=16).vgpus
    assert {p.kind for p in parts} == {"green_context"}
    assert 1 <= len(parts) <= sum(g.sm_count for g in whole) // 16
    assert all(p.sm_count == 16 and p.profile_kind.endswith("-16sm") for p in parts)


@pytest.mark.parametrize("green", [False, pytest.param(True, marks=needs_cuda_python)])
def test_cupy_executor_in_workers_matches_onnxruntime(conv, green):
    vgpus = discover("gpu", green_context_sms=16 if green else None).vgpus[:2]
    session = onnxruntime.InferenceSession(conv, providers=["CPUExecutionProvider"])
    model = RowModel({"x": ((3, 16, 16), np.float32)}, {"y": ((8, 16, 16), np.float32)})
    with WorkerPool(vgpus, executor="cupy") as pool, model.rows(pool, "conv") as rows:
        assert all(d["executor"] == "cupy" for d in model.load(pool, "conv", conv).values())
        for vgpu in pool.workers:
            for batch in (1, 4):
                x = np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)
                out = rows.submit(vgpu, {"x": x}).result(120)
                np.testing.assert_allclose(out["y"], session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
