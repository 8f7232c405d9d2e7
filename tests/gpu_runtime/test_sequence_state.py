"""Control inputs and implicit state filled in by the vGPU worker (gpu_runtime/vgpu/sequence_state.py),
as Triton's model_configuration.md ("Sequence Batcher": control inputs, implicit state management)
describes them: START/END/READY/CORRID per batch slot in their configured values, READY false for
slots without a request, the state input zero at START and the previous state output after it."""

from __future__ import annotations

import numpy as np

from gpu_runtime.vgpu.messages import RowSequence, SequenceControl, SequenceSpec, SequenceStateSpec
from gpu_runtime.vgpu.sequence_state import SequenceStates, warm_up_inputs

SPEC = SequenceSpec(
    (SequenceControl("start", "START", np.dtype(np.int32), (0, 1)),
     SequenceControl("end", "END", np.dtype(np.float32), (0.0, 1.0)),
     SequenceControl("ready", "READY", np.dtype(bool), (False, True)),
     SequenceControl("corrid", "CORRID", np.dtype(np.uint64))),
    (SequenceStateSpec("S_IN", "S_OUT", np.dtype(np.float32), (2,)),))  # fmt: skip


def test_controls_take_their_configured_values_and_padding_rows_are_not_ready():
    rows = (RowSequence(11, start=True), RowSequence(12, end=True))
    got = SequenceStates().inputs("m", SPEC, rows, 4)
    assert got["START"].tolist() == [[1], [0], [0], [0]] and got["START"].dtype == np.int32
    assert got["END"].tolist() == [[0.0], [1.0], [0.0], [0.0]] and got["END"].dtype == np.float32
    assert got["READY"].tolist() == [[True], [True], [False], [False]]
    assert got["CORRID"].tolist() == [[11], [12], [0], [0]] and got["CORRID"].dtype == np.uint64
    assert got["S_IN"].shape == (4, 2) and not got["S_IN"].any()


def test_a_string_correlation_id_and_a_model_without_batching():
    spec = SequenceSpec((SequenceControl("corrid", "CORRID", np.dtype(object)),), ())
    got = SequenceStates().inputs("m", spec, (RowSequence("abc"),), None)
    assert got["CORRID"].tolist() == ["abc"]  # shape [1]: no batch axis


def test_state_follows_its_sequence_restarts_at_start_and_is_dropped_at_end():
    states = SequenceStates()
    first = (RowSequence(1, start=True), RowSequence(2, start=True))
    states.inputs("m", SPEC, first, 2)
    kept = states.keep("m", SPEC, first, {"Y": np.zeros((2, 1)), "S_OUT": np.array([[1, 2], [3, 4]], np.float32)}, True)
    assert list(kept) == ["Y"]  # the state output is the server's, not the request's
    later = (RowSequence(2), RowSequence(1))
    assert states.inputs("m", SPEC, later, 2)["S_IN"].tolist() == [[3, 4], [1, 2]]
    restarted = (RowSequence(1, start=True),)
    assert states.inputs("m", SPEC, restarted, 1)["S_IN"].tolist() == [[0, 0]]
    states.keep("m", SPEC, (RowSequence(1, end=True),), {"S_OUT": np.ones((1, 2), np.float32)}, True)
    assert states.held == 1  # 2's
    states.inputs("m", SPEC, (RowSequence(3, start=True),), 1, released=(2,))
    assert states.held == 0


def test_warm_up_inputs_cover_every_control_and_state():
    got = warm_up_inputs(SPEC, 8)
    assert set(got) == {"START", "END", "READY", "CORRID", "S_IN"} and all(v.shape[0] == 8 for v in got.values())
