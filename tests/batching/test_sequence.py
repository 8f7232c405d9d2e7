"""The sequence batcher's decisions (batching/sequence.py), held to Triton's documentation:
docs/user_guide/model_configuration.md, "Sequence Batcher" (controls, the Direct and Oldest
strategies, max_sequence_idle_microseconds) and docs/user_guide/architecture.md, "Stateful Models"
(all requests of a sequence go to the same model instance, in order; the correlation ID; START).
Time is passed in: no test waits."""

from __future__ import annotations

import pytest
from batching.sequence import (
    DEFAULT_IDLE_US,
    Control,
    SequenceBatcher,
    SequenceError,
    SequenceRequest,
    SequenceSettings,
    State,
    read_sequence_batching,
)

from atoll.repository import pbtxt
from atoll.repository.specs import TYPES

CONTROLS = """
control_input [
  { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
  { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
  { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
  { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
]
state [ { input_name: "S_IN" output_name: "S_OUT" data_type: TYPE_FP32 dims: [ 2, 3 ] } ]
"""


def settings(text: str) -> SequenceSettings:
    return read_sequence_batching(pbtxt.loads(text), TYPES)


def test_the_config_reads_controls_strategies_and_states():
    s = settings(CONTROLS + "max_sequence_idle_microseconds: 300 oldest { max_candidate_sequences: 4 "
                            "preferred_batch_size: [ 2, 3 ] max_queue_delay_microseconds: 50 }")
    assert s.controls == (Control("start", "START", "INT32", (0, 1)), Control("end", "END", "FP32", (0, 1)),
                          Control("ready", "READY", "BOOL", (False, True)), Control("corrid", "CORRID", "BYTES", ()))
    assert s.states == (State("S_IN", "S_OUT", "FP32", (2, 3)),)
    assert (s.strategy, s.max_sequence_idle_us, s.max_candidate_sequences, s.preferred_batch_sizes,
            s.max_queue_delay_us) == ("oldest", 300, 4, (2, 3), 50)
    assert s.model_inputs == ("START", "END", "READY", "CORRID", "S_IN") and s.state_outputs == ("S_OUT",)
    plain = settings("")  # Triton's defaults: direct, 1 s idle
    assert plain.strategy == "direct" and plain.max_sequence_idle_us == DEFAULT_IDLE_US == 1_000_000


@pytest.mark.parametrize("text, words", [
    ("direct { } oldest { }", "one strategy"),
    ('control_input { name: "C" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } }', "TYPE_UINT64"),
    ('control_input { name: "S" control { kind: CONTROL_SEQUENCE_START } }', "int32_false_true"),
    ('control_input { name: "S" control { kind: CONTROL_SEQUENCE_START int32_false_true: [ 1 ] } }', "two values"),
    ('control_input [ { name: "A" control { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } }, '
     '{ name: "B" control { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } } ]', "more than once"),
    ('state { input_name: "a" output_name: "b" data_type: TYPE_FP32 dims: [ -1 ] }', "variable-size"),
    ("max_sequence_idle_microseconds: 0", "idle time must be positive"),
])  # fmt: skip
def test_a_config_it_cannot_serve_is_refused_with_a_reason(text, words):
    with pytest.raises(SequenceError, match=words):
        settings(text)


def req(corrid, t, start=False, end=False):
    return SequenceRequest(f"{corrid}@{t}", corrid, start, end, t)


def names(dispatch) -> list[str]:
    return [r.payload for r in dispatch.requests]


def test_requests_name_a_started_sequence_in_tritons_words():
    b = SequenceBatcher("m", SequenceSettings(), ("v",), 4)
    for corrid in (0, ""):
        with pytest.raises(SequenceError, match="inference request to model 'm' must specify a non-zero or "
                                                "non-empty correlation ID"):  # fmt: skip
            b.add(req(corrid, 0.0, start=True))
    with pytest.raises(SequenceError, match="inference request for sequence 7 to model 'm' must specify the "
                                            "START flag on the first request of the sequence"):  # fmt: skip
        b.add(req(7, 0.0))
    b.add(req(7, 0.0, start=True))
    b.add(req(7, 0.1))  # started: fine


def test_direct_pins_each_sequence_to_a_slot_and_batches_in_slot_order():
    b = SequenceBatcher("m", SequenceSettings("direct"), ("v",), 2)
    b.add(req("a", 0.0, start=True))
    b.add(req("b", 0.1, start=True))
    b.add(req("c", 0.2, start=True))  # two slots: c waits in the backlog
    first = b.poll(0.3)
    assert [names(d) for d in first] == [["a@0.0", "b@0.1"]]
    b.add(req("b", 0.4, end=True))
    b.add(req("a", 0.5))
    assert b.poll(0.6) == []  # one batch of the model on a vGPU at a time
    b.complete(first[0], 0.7)
    second = b.poll(0.8)
    assert [names(d) for d in second] == [["a@0.5", "b@0.4"]]  # slot order, not arrival order
    b.complete(second[0], 0.9)  # b ended: c takes its slot
    assert [names(d) for d in b.poll(1.0)] == [["c@0.2"]]
    assert b.sequences == 2


def test_a_batch_holds_one_request_per_sequence_in_order():
    b = SequenceBatcher("m", SequenceSettings("oldest"), ("v",), 8)
    for k in range(3):
        b.add(req("a", k * 0.1, start=k == 0))
    order = []
    while True:
        due = b.poll(1.0)
        if not due:
            break
        assert len(due[0].requests) == 1
        order += names(due[0])
        b.complete(due[0], 1.0)
    assert order == ["a@0.0", "a@0.1", "a@0.2"]


def test_oldest_waits_for_its_preferred_batch_or_its_delay_then_takes_the_oldest():
    s = SequenceSettings("oldest", max_candidate_sequences=3, preferred_batch_sizes=(2,), max_queue_delay_us=100_000)
    b = SequenceBatcher("m", s, ("v",), 2)
    b.add(req("a", 0.0, start=True))
    assert b.poll(0.05) == [] and b.next_deadline() == pytest.approx(0.1)
    alone = b.poll(0.1)  # waited out its delay alone
    assert [names(d) for d in alone] == [["a@0.0"]]
    b.complete(alone[0], 0.1)
    b.add(req("c", 0.2, start=True))
    b.add(req("b", 0.3, start=True))
    b.add(req("a", 0.4))
    due = b.poll(0.4)  # preferred size reached: at once, the two oldest of three candidates
    assert [names(d) for d in due] == [["c@0.2", "b@0.3"]]


def test_an_idle_sequence_is_released_and_its_state_named_for_dropping():
    b = SequenceBatcher("m", SequenceSettings(max_sequence_idle_us=500_000), ("v",), 1)
    b.add(req(1, 0.0, start=True))
    d = b.poll(0.0)[0]
    b.complete(d, 0.1)
    assert b.next_deadline() == pytest.approx(0.6)
    b.add(req(2, 0.2, start=True))  # the only slot is 1's: 2 waits
    assert b.poll(0.3) == []
    released = b.poll(0.6)  # 1 idle: released, 2 takes the slot, 1's state to be dropped on the way
    assert [(names(x), x.released) for x in released] == [(["2@0.2"], (1,))]
    with pytest.raises(SequenceError, match="must specify the START flag"):
        b.add(req(1, 0.7))


def test_sequences_spread_over_vgpus_and_stay_on_theirs():
    b = SequenceBatcher("m", SequenceSettings(), ("v0", "v1"), 4)
    b.add(req("a", 0.0, start=True))
    b.add(req("b", 0.0, start=True))
    first = b.poll(0.0)
    assert {d.vgpu: names(d) for d in first} == {"v0": ["a@0.0"], "v1": ["b@0.0"]}
    for d in first:
        b.complete(d, 0.1)
    b.add(req("b", 0.2))
    b.add(req("a", 0.2))
    assert {d.vgpu: names(d) for d in b.poll(0.2)} == {"v0": ["a@0.2"], "v1": ["b@0.2"]}


def test_direct_with_a_delay_waits_for_its_slot_utilization():
    s = SequenceSettings("direct", max_queue_delay_us=100_000, minimum_slot_utilization=0.5)
    b = SequenceBatcher("m", s, ("v",), 4)  # half of 4 slots: 2 requests
    b.add(req("a", 0.0, start=True))
    assert b.poll(0.01) == [] and b.next_deadline() == pytest.approx(0.1)
    b.add(req("b", 0.02, start=True))
    assert [names(d) for d in b.poll(0.02)] == [["a@0.0", "b@0.02"]]


def test_oldest_keeps_at_most_its_candidate_sequences_the_rest_wait():
    b = SequenceBatcher("m", SequenceSettings("oldest", max_candidate_sequences=1), ("v",), 4)
    b.add(req("a", 0.0, start=True))
    b.add(req("b", 0.1, start=True))
    first = b.poll(0.2)
    assert [names(d) for d in first] == [["a@0.0"]]
    b.add(req("a", 0.3, end=True))
    b.complete(first[0], 0.4)
    ended = b.poll(0.4)
    assert [names(d) for d in ended] == [["a@0.3"]]
    b.complete(ended[0], 0.5)  # a ended: b becomes the candidate
    assert [names(d) for d in b.poll(0.5)] == [["b@0.1"]]
