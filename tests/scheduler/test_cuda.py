"""The scheduler on a CUDA vGPU (cupy executor, CUDA graphs). References: the same programs run
unpreempted by the cupy executor alone (whose kernels are checked against onnxruntime in
tests/gpu_runtime), compared bit for bit; the CUDA occupancy API for our occupancy formula."""

import math
import time

import numpy as np
import pytest

from atoll.bench.harness import load_program, random_inputs
from gpu_runtime.executors.cupy_executor import CupyExecutor
from scheduler.cuda_device import CudaDevice, device_limits
from scheduler.profiler import occupancy
from scheduler.reef import Reef
from scheduler.task import RT, Task
from scheduler.vhq import chunk_bounds


@pytest.fixture(scope="module")
def programs():
    return {"rt": load_program("mobilenet_v3_small", "cuda", 0),
            "be": load_program("squeezenet1_1", "cuda", 100)}


def test_chunk_bounds_group_launches_by_duration():
    us = 1e-6
    assert chunk_bounds([30 * us] * 10, 100 * us) == [(0, 4), (4, 8), (8, 10)]
    assert chunk_bounds([250 * us, 10 * us, 10 * us], 100 * us) == [(0, 1), (1, 3)]
    assert chunk_bounds([5 * us], 100 * us) == [(0, 1)]


def _run_alone(ex, program, inputs):
    return ex.run(ex.load(program), inputs)


@pytest.mark.gpu
def test_graph_replay_equals_launch_by_launch(programs):
    ex = CupyExecutor()
    program = programs["be"]
    x = random_inputs(program, 3)
    state = ex.load(program)
    ex.set_inputs(state, x)
    for i in range(len(program.launches)):
        ex.launch(state, i)
    one_by_one = ex.outputs(state)
    graphed = _run_alone(ex, program, x)
    chunked = ex.load(program, chunks=[(0, 7), (7, 20), (20, len(program.launches))])
    ex.set_inputs(chunked, x)
    for k in range(3):
        ex.launch_chunk(chunked, k)
    assert all(np.array_equal(graphed[k], one_by_one[k]) for k in graphed)
    assert all(np.array_equal(ex.outputs(chunked)[k], graphed[k]) for k in graphed)
    assert chunked.progress.value == 3  # every marker ran with the flag clear


@pytest.mark.gpu
def test_native_rt_launch_raises_the_flag_and_stamps(programs):
    ex = CupyExecutor()
    dev = CudaDevice(ex, measure_start=True)
    assert dev.launcher is not None, "cc should build the launcher on a GPU machine"
    program = programs["rt"]
    state = dev.load(program, guarded=False)
    x = random_inputs(program, 4)
    dev.set_inputs(state, x)
    task = Task(0, RT, "r", x, 1, 1, time.perf_counter(), state=state)
    stream = dev.stream(guarded=False, priority=-1)
    stream.submit(task, 0, preempt=True)
    assert task.first_kernel_s is not None and task.first_kernel_s >= task.arrival_s
    stream.drain()
    assert int(dev.flag.device.get()[0]) == 1 and dev.flag.is_set()
    dev.clear_flag()
    assert int(dev.flag.device.get()[0]) == 0
    np.testing.assert_array_equal(ex.outputs(state)["logits"], _run_alone(ex, program, x)["logits"])
    dev.close()


@pytest.mark.gpu
@pytest.mark.parametrize("policy", ["seq", "streams", "wait", "reset", "reef"])
def test_scheduler_on_cuda_is_bit_identical(programs, policy):
    ex = CupyExecutor()
    # Short chunks so that RT requests land mid-task and BE tasks have several chunks to rewind.
    dev = CudaDevice(ex, chunk_s=20e-6)
    rt, be = programs["rt"], programs["be"]
    reef = Reef(ex, dev, policy, be_streams=2, poll_s=0.0)
    r = reef.add_client("r", rt, "rt")
    b0 = reef.add_client("b0", be, "be")
    reef.add_client("b1", be, "be")
    assert b0.units > 3 and r.units == 1
    xs = [random_inputs(be, k) for k in range(6)]
    xr = random_inputs(rt, 9)
    with reef:
        futures = [reef.submit(f"b{k % 2}", x) for k, x in enumerate(xs)]
        rt_results = []
        for f in futures:  # one RT request each time a BE task ends, the next ones mid-task
            f.result(timeout=60)
            rt_results.append(reef.submit("r", xr).result(timeout=60))
        results = [f.result(timeout=60) for f in futures]
    dev.close()
    ref_rt = _run_alone(ex, rt, xr)["logits"]
    for x, r in zip(xs, results):
        np.testing.assert_array_equal(r.outputs["logits"], _run_alone(ex, be, x)["logits"])
    for r in rt_results:
        np.testing.assert_array_equal(r.outputs["logits"], ref_rt)
    # Each RT request came alone: under streams/reset/reef submit() launched its graph.
    assert reef.stats.rt_started_on_arrival == (len(rt_results) if policy in ("streams", "reset", "reef") else 0)


@pytest.mark.gpu
def test_occupancy_matches_the_cuda_occupancy_api(programs):
    """Reference: cuOccupancyMaxActiveBlocksPerMultiprocessor on the compiled zoo kernels, with
    the limits read from this device."""
    import cupy  # optional: CuPy, GPU only


    driver = cupy.cuda.driver
    if not hasattr(driver, "occupancyMaxActiveBlocksPerMultiprocessor"):
        pytest.skip("this CuPy does not expose the occupancy API")
    ex = CupyExecutor()
    limits = device_limits(cupy)
    checked = 0
    for program in programs.values():
        for launch in {l.kernel.name: l for l in program.launches}.values():
            fn = ex.compile(launch.kernel)
            threads = math.prod(launch.block)
            blocks = driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads, launch.shared_bytes)
            regs, smem = fn.attributes["num_regs"], fn.attributes["shared_size_bytes"]
            ours = occupancy(threads, regs, smem + launch.shared_bytes, limits)
            assert ours == pytest.approx(blocks * math.ceil(threads / 32) / limits.max_warps_per_sm), launch.kernel.name
            checked += 1
    assert checked > 5
