"""Device memory on the CUDA emulator's accounting (executor cuda-emu): the programs of a model
share one copy of its weights and one arena sized by the largest, a load that would not fit is
refused with the sizes named, and the cupy executor's outputs wait on the stream that ran."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpu_runtime.compiler.shapes import ModelShapes
from gpu_runtime.executors.cupy_executor import CupyExecutor
from gpu_runtime.executors.device_memory import MB, DeviceMemoryError
from gpu_runtime.executors.emulated_executor import EmulatedExecutor
from gpu_runtime.executors.loaders import ProgramRunner
from gpu_runtime.vgpu.discovery import discover_vgpus
from gpu_runtime.vgpu.pool import WorkerError, WorkerPool
from scheduler.vgpu_engine import engine_for

pytestmark = pytest.mark.timeout(300)


def conv1d_model(path, channels: int) -> str:
    """(N, C, T) -> Conv(k=3) -> Relu, N and T dynamic: an audio model's shapes in miniature."""
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3], pads=[1, 1]),
         helper.make_node("Relu", ["c"], ["y"])],
        "conv1d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", channels, "T"])],
        [numpy_helper.from_array(rng.standard_normal((channels, channels, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b")],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return conv1d_model(tmp_path_factory.mktemp("mem") / "small.onnx", 8)


def test_a_models_programs_share_one_weight_copy_and_one_arena(small):
    session = onnxruntime.InferenceSession(small, providers=["CPUExecutionProvider"])
    ex = EmulatedExecutor()
    runner = ProgramRunner(ex, small)
    rng = np.random.default_rng(1)
    for batch, length in [(1, 6), (4, 6), (2, 12), (4, 12), (1, 6)]:  # arenas grow twice
        x = rng.standard_normal((batch, 8, length)).astype(np.float32)
        np.testing.assert_allclose(runner.run({"x": x})["y"], session.run(None, {"x": x})[0],
                                   rtol=1e-5, atol=1e-5)
    programs = [state.program for state in runner.states.values()]
    assert len(programs) == 4
    weights, largest = programs[0].weight_bytes, max(p.arena_bytes for p in programs)
    held = ex.memory.held()[runner.name]
    assert held == {"weights": weights, "arena": largest, "total": weights + largest}
    assert held["total"] <= 1.1 * (weights + largest)  # the acceptance bound (issue 32)
    assert sum(p.weight_bytes + p.arena_bytes for p in programs) > 2 * held["total"]  # unshared
    assert runner.describe()["device_memory"] == held


def test_a_load_that_would_not_fit_is_refused_with_the_sizes(tmp_path):
    path = conv1d_model(tmp_path / "large.onnx", 512)  # 3 MB of weights
    program = ModelShapes(path).program((8, 64))
    need = program.weight_bytes + program.arena_bytes
    ex = EmulatedExecutor(memory_bytes=need - 1)
    message = (rf"needs {need / MB:.1f} MB more \(weights {program.weight_bytes / MB:.1f} MB, arena "
               rf"{program.arena_bytes / MB:.1f} MB\) but the vGPU has {(need - 1) / MB:.1f} MB free of "
               rf"{(need - 1) / MB:.1f} MB")
    with pytest.raises(DeviceMemoryError, match=message):
        ex.load(program)
    assert ex.memory.held() == {}  # nothing allocated by the refused load
    fits = EmulatedExecutor(memory_bytes=need)
    state = fits.load(program)
    assert fits.memory.held()[program.model]["total"] == need
    del state
    assert fits.memory.held() == {}  # released with the last state that used it


def test_the_worker_refuses_a_model_larger_than_its_vgpu(small):
    info = dataclasses.replace(discover_vgpus("cpu", cpu_vgpus=1)[0], memory_bytes=1000)
    with WorkerPool([info], executor="cuda-emu", engine=engine_for("reset")) as pool:
        with pytest.raises(WorkerError, match=r"small: loading \S+ needs \d+ bytes more \(weights \d+ bytes, arena "
                                              r"\d+ bytes\) but the vGPU has 1000 bytes free of 1000 bytes"):
            pool.load_model("small", small, max_batch=4, lengths=(6,))


class _Stream:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def synchronize(self):
        self.log.append(self.name)


def test_cupy_outputs_wait_on_the_stream_that_ran_the_graph():
    """The executor's own logic on stand-ins for CuPy's streams and graph (no GPU needed)."""
    log = []
    ex = CupyExecutor.__new__(CupyExecutor)
    ex._cp = types.SimpleNamespace(asnumpy=lambda a, stream: (log.append(f"copy on {stream.name}"), a)[1])
    graph = types.SimpleNamespace(launch=lambda stream: log.append(f"graph on {stream.name}"))
    state = types.SimpleNamespace(graph=graph, stream=_Stream(log, "own"), ran_on=None, views=[np.ones(2)],
                                  program=types.SimpleNamespace(outputs={"y": 0}))
    ex.execute(state, _Stream(log, "rt"))
    np.testing.assert_array_equal(ex.outputs(state)["y"], np.ones(2, np.float32))
    assert log == ["graph on rt", "rt", "copy on rt"]


@pytest.mark.gpu
def test_on_the_gpu_programs_share_weights_and_arena_and_outputs_wait_for_their_stream(small):
    session = onnxruntime.InferenceSession(small, providers=["CPUExecutionProvider"])
    ex = CupyExecutor()
    runner = ProgramRunner(ex, small)
    rng = np.random.default_rng(2)
    for batch, length in [(1, 6), (4, 12), (2, 6)]:
        x = rng.standard_normal((batch, 8, length)).astype(np.float32)
        np.testing.assert_allclose(runner.run({"x": x})["y"], session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    programs = [state.program for state in runner.states.values()]
    weights, largest = programs[0].weight_bytes, max(p.arena_bytes for p in programs)
    assert ex.memory.held()[runner.name] == {"weights": weights, "arena": largest, "total": weights + largest}
    state = runner.states[4, 12]
    x = rng.standard_normal((4, 8, 12)).astype(np.float32)
    ex.set_inputs(state, {"x": x})
    state.stream.synchronize()
    import cupy  # optional: CuPy, GPU only

    other = cupy.cuda.Stream(non_blocking=True)
    ex.execute(state, other)  # on another stream, as the scheduler's RT and vHQ streams do
    np.testing.assert_allclose(ex.outputs(state)["y"], session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
