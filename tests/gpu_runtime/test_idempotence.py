"""Every launch of every zoo model is idempotent (ARCHITECTURE §3): run twice on the same buffers
it writes identical outputs, and it never writes a buffer it only reads."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_runtime.compiler.importer import import_model
from gpu_runtime.executors.numpy_executor import NumpyExecutor
from gpu_runtime.program import BufferRef
from tests.gpu_runtime.zoo_cases import input_for, zoo_model


@pytest.mark.parametrize("name,length", [("mobilenet_v3_small", None), ("squeezenet1_1", None),
                                         ("swin_t", None), ("conformer", 96), ("citrinet", 96)])
def test_every_launch_is_idempotent(name, length):
    program = import_model(zoo_model(name), 1, length)
    ex = NumpyExecutor()
    state = ex.load(program)
    ex.set_inputs(state, input_for(name, 1, length))
    for i, launch in enumerate(program.launches):
        reads = {a.index for a in launch.args if isinstance(a, BufferRef)} - set(launch.writes)
        before = {r: state.views[r].copy() for r in reads}
        ex.launch(state, i)
        first = [state.views[w].copy() for w in launch.writes]
        ex.launch(state, i)
        for w, out in zip(launch.writes, first):
            assert np.array_equal(state.views[w], out, equal_nan=True), (i, launch.kernel.name)
        for r, val in before.items():
            assert np.array_equal(state.views[r], val, equal_nan=True), (i, launch.kernel.name)
