"""The scheduler on a CUDA vGPU (cupy executor). References: the same programs run unpadded and
unpreempted by the cupy executor alone (whose kernels are checked against onnxruntime in
tests/gpu_runtime), compared bit for bit."""

import time

import numpy as np
import pytest

from atoll.bench.harness import load_program, random_inputs
from scheduler.padded_kernel import device_form, dispatcher_source



@pytest.fixture(scope="module")
def programs():
    return {"rt": load_program("mobilenet_v3_small", "cuda", 0),
            "be": load_program("squeezenet1_1", "cuda", 100)}


def test_device_forms_of_every_zoo_kernel(programs):
    """Source-level: runs everywhere (compiling it needs the GPU test below)."""
    for program in programs.values():
        for kernel in program.kernels().values():
            src, params = device_form(kernel, "ns")
            assert "blockIdx" not in src and "gridDim" not in src and "__global__" not in src
            assert params[0].endswith("atoll_preempt")
    kernels = list(programs["rt"].kernels().values())[:2] + list(programs["be"].kernels().values())[:1]
    src = dispatcher_source(kernels, 256, 4)
    assert src.count("::body(") == 3 and "__launch_bounds__(256, 4)" in src


def _run_alone(ex, program, inputs):
    state = ex.load(program)
    return ex.run(state, inputs)


@pytest.mark.gpu
def test_padded_launches_are_bit_identical(programs):
    from gpu_runtime.executors.cupy_executor import CupyExecutor
    from scheduler.cuda_device import CudaDevice

    ex = CupyExecutor()
    dev = CudaDevice(ex)
    rt, be = programs["rt"], programs["be"]
    x = {"rt": random_inputs(rt, 1), "be": random_inputs(be, 2)}
    ref = {"rt": _run_alone(ex, rt, x["rt"]), "be": _run_alone(ex, be, x["be"])}
    srt, sbe = dev.load(rt, guarded=False), dev.load(be, guarded=True)
    dev.set_inputs(srt, x["rt"])
    dev.set_inputs(sbe, x["be"])
    stream = dev.cp.cuda.Stream(non_blocking=True)
    j, padded = 0, 0
    for i in range(len(rt.launches)):
        # Pad with the BE program's next kernel whenever the block sizes agree (rules aside).
        if j < len(be.launches) and dev.padder.launch([(srt, i), (sbe, j)], stream):
            j += 1
            padded += 1
        else:
            ex.launch(srt, i, stream)
    for k in range(j, len(be.launches)):
        ex.launch(sbe, k, stream)
    stream.synchronize()
    assert padded > 10, list(dev.padder.errors.values())[:1]
    np.testing.assert_array_equal(ex.outputs(srt)["logits"], ref["rt"]["logits"])
    np.testing.assert_array_equal(ex.outputs(sbe)["logits"], ref["be"]["logits"])
    dev.close()


@pytest.mark.gpu
@pytest.mark.parametrize("policy", ["seq", "streams", "wait", "reset", "reef"])
def test_scheduler_on_cuda_is_bit_identical(programs, policy):
    from gpu_runtime.executors.cupy_executor import CupyExecutor
    from scheduler.cuda_device import CudaDevice
    from scheduler.reef import Reef

    ex = CupyExecutor()
    dev = CudaDevice(ex)
    rt, be = programs["rt"], programs["be"]
    reef = Reef(ex, dev, policy, be_streams=2, poll_s=0.0)
    reef.add_client("r", rt, "rt")
    reef.add_client("b0", be, "be")
    reef.add_client("b1", be, "be")
    xs = [random_inputs(be, k) for k in range(6)]
    xr = random_inputs(rt, 9)
    with reef:
        futures = [reef.submit(f"b{k % 2}", x) for k, x in enumerate(xs)]
        rt_results = []
        while not all(f.done() for f in futures):  # one RT request at a time, BE work between
            rt_results.append(reef.submit("r", xr).result(timeout=60))
            time.sleep(0.001)
        results = [f.result(timeout=60) for f in futures]
    dev.close()
    ref_rt = _run_alone(ex, rt, xr)["logits"]
    for x, r in zip(xs, results):
        np.testing.assert_array_equal(r.outputs["logits"], _run_alone(ex, be, x)["logits"])
    for r in rt_results:
        np.testing.assert_array_equal(r.outputs["logits"], ref_rt)
    if policy in ("reset", "reef"):
        assert sum(r.preemptions for r in results) > 0
    # Each RT request came alone: under streams/reset/reef submit() launched its first kernel.
    assert reef.stats.rt_started_on_arrival == (len(rt_results) if policy in ("streams", "reset", "reef") else 0)


@pytest.mark.gpu
def test_occupancy_matches_the_cuda_occupancy_api(programs):
    """Reference: cuOccupancyMaxActiveBlocksPerMultiprocessor on the compiled zoo kernels."""
    import math

    import cupy

    from gpu_runtime.executors.cupy_executor import CupyExecutor
    from scheduler.profiler import SM90, occupancy

    driver = cupy.cuda.driver
    if not hasattr(driver, "occupancyMaxActiveBlocksPerMultiprocessor"):
        pytest.skip("this CuPy does not expose the occupancy API")
    ex = CupyExecutor()
    checked = 0
    for program in programs.values():
        for launch in {l.kernel.name: l for l in program.launches}.values():
            fn = ex.compile(launch.kernel)
            threads = math.prod(launch.block)
            blocks = driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads, launch.shared_bytes)
            regs, smem = fn.attributes["num_regs"], fn.attributes["shared_size_bytes"]
            ours = occupancy(threads, regs, smem + launch.shared_bytes, SM90)
            assert ours == pytest.approx(blocks * math.ceil(threads / 32) / SM90.max_warps_per_sm), launch.kernel.name
            checked += 1
    assert checked > 5
