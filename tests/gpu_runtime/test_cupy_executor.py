"""The CUDA path. Signature checks run everywhere; the rest needs a GPU (@pytest.mark.gpu) and
compares our NVRTC-compiled kernels against onnxruntime (the reference) on every zoo model."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpu_runtime.compiler.importer import import_model
from gpu_runtime.executors.cupy_executor import CupyExecutor
from gpu_runtime.executors.numpy_executor import NumpyExecutor
from gpu_runtime.program import BufferRef
from tests.gpu_runtime.zoo_cases import CASES, input_for, onnxruntime_outputs, zoo_model

SIGNATURE = re.compile(r'extern "C" __global__ void (\w+)\((.*?)\)\s*\{', re.S)
MACRO_PARAMS = {"ATOLL_DIMS_PARAMS": ["int"] * 6}


def _param_types(params: str) -> list[str]:
    types = []
    for p in (p.strip() for p in params.split(",")):
        if p in MACRO_PARAMS:
            types += MACRO_PARAMS[p]
        elif p.startswith("ATOLL_STRIDE_PARAMS"):
            types += ["int"] * 6
        elif "*" in p:
            types.append("ptr")
        else:
            types.append(p.split()[0])
    return types


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("name,length", [("mobilenet_v3_small", None), ("squeezenet1_1", None),
                                         ("swin_t", None), ("conformer", 64), ("citrinet", 64)])
def test_launch_arguments_match_cuda_signatures(name, length, precision):
    """Every launch passes exactly what its CUDA kernel declares: buffers for pointers, Python
    ints for `int`, floats for `float`; the guard is the first statement."""
    program = import_model(zoo_model(name), 1, length, precision=precision)
    for launch in program.launches:
        src = launch.kernel.cuda_source
        kname, params = SIGNATURE.search(src).groups()
        assert kname == launch.kernel.name
        types = _param_types(params)
        assert types[0] == "ptr" and "atoll_preempt" in params.split(",")[0]
        body = src[SIGNATURE.search(src).end():]
        assert body.lstrip().startswith("ATOLL_GUARD(atoll_preempt);")
        assert len(types) == 1 + len(launch.args), kname
        for t, a in zip(types[1:], launch.args):
            want = {"ptr": BufferRef, "int": int, "float": float}[t]
            assert type(a) is want, (kname, t, a)
        assert all(-2**31 <= a < 2**31 for a in launch.args if type(a) is int)
        assert launch.block[0] * launch.block[1] * launch.block[2] <= 1024
        assert all(1 <= g < 2**31 for g in launch.grid) and launch.grid[1] < 65536


@pytest.fixture(scope="module")
def gpu():
    return CupyExecutor()


@pytest.mark.gpu
@pytest.mark.parametrize("name,batch,length", CASES)
def test_cupy_zoo_model_matches_onnxruntime(gpu, name, batch, length):
    program = import_model(zoo_model(name), batch, length)
    feeds = input_for(name, batch, length)
    got = gpu.run(gpu.load(program), feeds)
    want = onnxruntime_outputs(name, feeds)
    for key in want:
        err = np.abs(got[key] - want[key]).max() / np.abs(want[key]).max()
        assert err < 1e-3, f"{name} b{batch}: relative error {err:.2e}"


@pytest.mark.gpu
def test_cupy_kernels_match_numpy_launch_by_launch(gpu):
    """Each CUDA kernel against its NumPy body on the same inputs (localises a wrong kernel)."""
    name, length = "conformer", 64
    program = import_model(zoo_model(name), 2, length)
    feeds = input_for(name, 2, length)
    ex = NumpyExecutor()
    ns, cs = ex.load(program), gpu.load(program)
    ex.set_inputs(ns, feeds)
    gpu.set_inputs(cs, feeds)
    for i, launch in enumerate(program.launches):
        ex.launch(ns, i)
        gpu.launch(cs, i)
        gpu.synchronize(cs)
        for w in launch.writes:
            ref = ns.views[w]
            err = np.abs(cs.views[w].get() - ref).max() / max(np.abs(ref).max(), 1e-6)
            assert err < 1e-4, (i, launch.kernel.name, err)
            cs.views[w].set(ref)  # keep the two runs on identical inputs


@pytest.mark.gpu
def test_cupy_set_flag_makes_launches_no_ops(gpu):
    program = import_model(zoo_model("squeezenet1_1"), 1)
    state = gpu.load(program)
    gpu.set_inputs(state, input_for("squeezenet1_1", 1, None))
    gpu.synchronize(state)
    state.flag.set()
    before = state.arena.get()
    for i in range(len(program.launches)):
        gpu.launch(state, i)
    gpu.synchronize(state)
    assert np.array_equal(state.arena.get(), before)


@pytest.mark.gpu
def test_cupy_preempted_and_restored_run_is_bit_identical(gpu):
    """REEF's protocol with c = 3 kernels outstanding: note which launches had finished (events),
    set the flag, drain, clear, and re-run from the first launch not known to have finished."""
    import cupy  # optional: CuPy, GPU only

    name, outstanding = "mobilenet_v3_small", 3
    program = import_model(zoo_model(name), 2)
    feeds = input_for(name, 2, None)
    clean = gpu.run(gpu.load(program), feeds)
    state = gpu.load(program)
    gpu.set_inputs(state, feeds)
    stop = len(program.launches) // 2
    events = []
    for i in range(stop):
        if i >= outstanding:
            events[i - outstanding].synchronize()  # the virtual host queue keeps c in flight
        gpu.launch(state, i)
        events.append(cupy.cuda.Event(disable_timing=True))
        events[-1].record(state.stream)
    done = next((i for i, e in enumerate(events) if not e.done), stop)  # first not finished
    state.flag.set()
    gpu.synchronize(state)
    state.flag.clear()
    assert stop - done <= outstanding
    for i in range(done, len(program.launches)):
        gpu.launch(state, i)
    out = gpu.outputs(state)
    assert all(np.array_equal(out[k], clean[k]) for k in clean)
