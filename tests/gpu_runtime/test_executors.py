"""The executor registry behind vGPU workers: the NumPy kernel-program executor through the pool
(rows in slot arenas, `row_runs`), with programs planned per (batch, length), against onnxruntime as
the reference."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import types
from pathlib import Path

import numpy
import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpu_runtime import executors as vgpu_executors
from gpu_runtime.executors import probe_executors
from gpu_runtime.executors.loaders import ProgramRunner
from gpu_runtime.executors.probes import CUPY_WHEELS, cupy_stack
from gpu_runtime.executors.numpy_executor import NumpyExecutor
from gpu_runtime.vgpu.discovery import discover_vgpus
from gpu_runtime.vgpu.pool import WorkerError, WorkerPool
from tests.gpu_runtime.row_runs import RowModel

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def conv1d(tmp_path_factory):
    """Audio-shaped: (N, 8, T) -> Conv(k=3) -> Relu -> (N, 4, T-2); T varies."""
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3]),
         helper.make_node("Relu", ["c"], ["y"])],
        "conv1d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, None])],
        [numpy_helper.from_array(rng.standard_normal((4, 8, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")],
    )  # fmt: skip
    path = tmp_path_factory.mktemp("exec") / "conv1d.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def test_registry_names_every_executor():
    assert set(vgpu_executors.EXECUTORS) == {"onnxruntime", "numpy", "cupy", "cuda-emu"}
    assert [n for n, s in vgpu_executors.EXECUTORS.items() if s.preemptible] == ["numpy", "cupy", "cuda-emu"]
    assert vgpu_executors.preemptible_executor(gpu=False) == "numpy"
    with pytest.raises(ValueError, match="whole graphs"):
        vgpu_executors.program_executor("onnxruntime")
    with pytest.raises(vgpu_executors.UnknownExecutor, match="available"):
        vgpu_executors.loader("tensorrt")


def test_numpy_executor_through_the_pool(conv1d):
    session = onnxruntime.InferenceSession(conv1d, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    model = RowModel({"x": ((8, -1), np.float32)}, {"y": ((4, -1), np.float32)}, bound=17)
    with WorkerPool(discover_vgpus("cpu", cpu_vgpus=1), executor="numpy") as pool, model.rows(pool, "conv1d") as rows:
        described = model.load(pool, "conv1d", conv1d)
        assert described["cpu0"] == {"executor": "numpy", "preemptible": True, "scheduler": "serial",
                                     "instances": 1, "batch_sizes": [], "out_row_bytes": 0}
        for batch, length in [(1, 10), (3, 10), (3, 17), (1, 10)]:
            x = rng.standard_normal((batch, 8, length)).astype(np.float32)
            out = rows.submit("cpu0", {"x": x}).result(60)
            np.testing.assert_allclose(out["y"], session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
        with pytest.raises(WorkerError):  # 7 channels where the weights take 8
            rows.submit("cpu0", {"x": x[:, :7]}).result(60)


def test_program_runner_plans_once_per_shape(conv1d):
    runner = ProgramRunner(NumpyExecutor(), conv1d)
    for batch, length in [(2, 9), (2, 9), (2, 12), (4, 9)]:
        runner.run({"x": np.ones((batch, 8, length), np.float32)})
    assert sorted(runner.states) == [(2, 9), (2, 12), (4, 9)]


def test_program_runner_plans_fixed_shape_models_up_front(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )  # fmt: skip
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    runner = ProgramRunner(NumpyExecutor(), path, max_batch=12)
    assert sorted(runner.states) == [(1, None), (2, None), (4, None), (8, None), (12, None)]
    x = np.linspace(-1, 1, 12 * 4, dtype=np.float32).reshape(12, 4)
    np.testing.assert_array_equal(runner.run({"x": x})["y"], np.maximum(x, 0))  # numpy reference
    assert len(runner.states) == 5


def test_probe_executors_never_raises(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    probes = probe_executors()
    assert probes["numpy"] == {"available": True, "version": numpy.__version__}
    assert probes["onnxruntime"]["available"] and "CPUExecutionProvider" in probes["onnxruntime"]["providers"]
    assert probes["onnxruntime"]["version"] == onnxruntime.__version__
    assert probes["cupy"]["available"] is False and probes["cupy"]["reason"]


def test_probe_reports_a_cupy_without_driver(monkeypatch):
    def no_driver():
        raise RuntimeError("cudaErrorInsufficientDriver")

    cupy = types.SimpleNamespace(
        __version__="13.0", cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=no_driver))
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    assert probe_executors()["cupy"] == {
        "available": False,
        "reason": "RuntimeError: cudaErrorInsufficientDriver",
    }


def test_registry_holds_references_and_an_unknown_name_lists_the_choices():
    for name, s in vgpu_executors.EXECUTORS.items():
        assert callable(s.loader) and callable(s.probe) and s.executor.name == name
    assert vgpu_executors.program_executor("numpy") is NumpyExecutor
    assert vgpu_executors.program_executors() == ["numpy", "cupy", "cuda-emu"]
    assert vgpu_executors.EXECUTOR_CHOICES == ("auto", "onnxruntime", "numpy", "cupy", "cuda-emu")
    assert vgpu_executors.resolve_executor("auto", discover_vgpus("cpu", cpu_vgpus=1)) == "onnxruntime"
    with pytest.raises(vgpu_executors.UnknownExecutor,
                       match="unknown executor 'tensorrt'; available: cuda-emu, cupy, numpy, onnxruntime"):
        vgpu_executors.spec("tensorrt")


def test_the_registry_touches_no_cuda():
    """Importing the registry (and with it every executor module) must not import CuPy: a vGPU
    worker sets its CUDA environment first."""
    code = "import sys, gpu_runtime.executors; print('cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"


def _dist(name, version):
    return types.SimpleNamespace(metadata={"Name": name}, version=version)


def test_atoll_says_which_cupy_is_in_use_and_why():
    def installed(*names):
        return lambda: [_dist("numpy", "2.1"), *(_dist(n, "14.2.0") for n in names)]

    assert cupy_stack(installed())["package"] is None
    assert "atoll[gpu]" in cupy_stack(installed())["why"] and "atoll[gpu-cuda13]" in cupy_stack(installed())["why"]
    assert cupy_stack(installed("cupy-cuda12x")) == {
        "package": "cupy-cuda12x 14.2.0",
        "why": "the `gpu` extra's wheel, built for CUDA 12: it needs a driver for CUDA 12 or newer"}
    assert cupy_stack(installed("cupy-cuda13x"))["why"].startswith("the `gpu-cuda13` extra's wheel, built for CUDA 13")
    both = cupy_stack(installed("cupy-cuda12x", "cupy-cuda13x"))
    assert both["package"] == "cupy-cuda12x 14.2.0, cupy-cuda13x 14.2.0" and "uninstall all but one" in both["why"]


def test_the_gpu_extras_install_the_wheels_the_probe_names():
    extras = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for wheel, (extra, _) in CUPY_WHEELS.items():
        assert any(req.startswith(wheel) for req in extras[extra]), (extra, wheel)
