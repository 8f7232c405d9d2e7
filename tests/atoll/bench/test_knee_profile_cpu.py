"""`atoll profile` on a CPU vGPU: per-input CPU cost on a fake clock against the cost-floor rule,
the worker's CPU clock, the preprocessing load beside it, the plot, and one real run at load."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import onnx
import pytest
from batching.knee import COST_FLOOR, KNEE, cost_floor
from batching.profile import BucketProfile, ModelProfile, load_profile
from onnx import TensorProto, helper, numpy_helper

from atoll.bench.knee_profile import PreprocessingLoad, default_load, measure, plot, worker_cpu_s
from atoll.cli import main
from tests.atoll.probes import until


class FakeClocks:
    """Wall and CPU time advanced by the runner: per input 4 ms of wall, and per batch 1 ms of CPU
    shared by its inputs plus 1 ms each, every fifth batch taking twice the CPU (a neighbour's burst)."""

    def __init__(self):
        self.wall = self.cpu = 0.0
        self.batches = 0

    def run(self, batch, length):
        self.batches += 1
        self.wall += 0.004 * batch
        self.cpu += (0.001 + 0.001 * batch) * (2.0 if self.batches % 5 == 0 else 1.0)


def test_measure_records_the_median_cpu_cost_per_input_and_batch_max_by_the_cost_floor():
    clocks = FakeClocks()
    sizes = [1, 2, 4, 8, 16, 32]
    m = measure(clocks.run, "cls", "image", [], sizes, repeats=5, warmup=1, percentile=50,
                clock=lambda: clocks.wall, progress=False, cpu_clock=lambda: clocks.cpu, rule=COST_FLOOR)
    (bucket,) = m.buckets
    assert m.rule == COST_FLOOR
    assert bucket.cpu_ms_per_input == pytest.approx({b: 1.0 / b + 1.0 for b in sizes})  # bursts: not the median
    assert bucket.latency_ms == pytest.approx({b: 4.0 * b for b in sizes})
    # 1 / b + 1 within 5 % of 1 / 32 + 1 (1.0828): from b = 16 (1.0625; 1.125 at 8 is not)
    assert (bucket.batch_knee, bucket.time_knee_ms) == pytest.approx((16, 64.0))
    assert (bucket.batch_knee, bucket.time_knee_ms) == cost_floor(bucket.latency_ms, bucket.cpu_ms_per_input)
    # the knee rule on the same run: no CPU clock needed, none recorded
    knee = measure(clocks.run, "cls", "image", [], sizes, 5, 1, 50, lambda: clocks.wall, False)
    assert knee.rule == KNEE and knee.buckets[0].cpu_ms_per_input is None
    with pytest.raises(ValueError, match="needs a CPU clock"):
        measure(clocks.run, "cls", "image", [], sizes, 5, 1, 50, lambda: clocks.wall, False, rule=COST_FLOOR)


def test_worker_cpu_clock_counts_every_thread_of_a_process():
    burnt, done = threading.Event(), threading.Event()

    def burn() -> None:
        started = time.thread_time()  # this thread's own CPU: 100 ms, however long that takes
        while time.thread_time() - started < 0.1:
            np.sqrt(np.arange(10_000.0))

    def other() -> None:
        burn()
        burnt.set()
        done.wait()  # alive when counted: an ended thread's time leaves /proc/PID/task

    before = worker_cpu_s(os.getpid())
    thread = threading.Thread(target=other)
    thread.start()
    burn()
    burnt.wait(60)
    after = worker_cpu_s(os.getpid())
    done.set()
    thread.join()
    # (measured against each thread's own clock: the runner's other threads only add, where the
    # process's clock once counted threads that ended meanwhile, and the check failed at 0.12 s)
    assert after - before >= 0.19


def test_default_load_leaves_one_core_to_a_cpu_vgpu_and_none_beside_gpus():
    assert default_load("cpu") == len(os.sched_getaffinity(0)) - 1
    assert default_load("mig") == default_load("gpu") == 0


@pytest.mark.timeout(180)
def test_preprocessing_load_decodes_jpegs_until_it_ends():
    with PreprocessingLoad(1) as load:
        until(lambda: load.done >= 20, "20 JPEGs preprocessed in the background")
    done = load.done
    assert load.rate() > 0
    time.sleep(0.2)
    assert load.done == done  # nothing more after the block: the pool is closed
    with PreprocessingLoad(0) as idle:
        assert idle.rate() == 0.0


def test_plot_draws_cost_and_latency(tmp_path):
    bucket = BucketProfile(None, 4, 6.0, {1: 3.0, 2: 4.0, 4: 6.0}, {1: 3.0, 2: 2.0, 4: 1.5})
    plot("cls", ModelProfile("image", (bucket,), COST_FLOOR), 95.0, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _tiny_image_repository(root):
    # y = x @ w: CPU time grows with the batch
    w = numpy_helper.from_array(np.ones((256, 256), dtype=np.float32) / 256, "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 256])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (root / "tiny" / "1").mkdir(parents=True)
    onnx.save(model, str(root / "tiny" / "1" / "model.onnx"))
    (root / "tiny" / "config.pbtxt").write_text(
        'name: "tiny"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 256 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 256 ] } ]\n')
    return root


@pytest.mark.timeout(240)
def test_profile_command_on_a_cpu_vgpu_at_load_records_cpu_cost_and_plots(tmp_path):
    repo = _tiny_image_repository(tmp_path / "repo")
    out, png = tmp_path / "cpu.json", tmp_path / "cpu.png"
    assert main(["profile", "tiny", "--repository", str(repo), "--vgpu-mode", "cpu", "--vgpu", "cpu0",
                 "--batches", "1,2,8", "--repeats", "3", "--warmup", "1", "--load", "1",
                 "--out", str(out), "--plot", str(png)]) == 0
    tiny = load_profile(out).models["tiny"]
    (bucket,) = tiny.buckets
    assert tiny.rule == COST_FLOOR and sorted(bucket.cpu_ms_per_input) == [1, 2, 8]
    assert (bucket.batch_knee, bucket.time_knee_ms) == cost_floor(bucket.latency_ms, bucket.cpu_ms_per_input)
    assert "at load: 1 JPEG preprocessing process" in tiny.source
    assert png.read_bytes()[:4] == b"\x89PNG"
