"""Issue #43, item 3: stateful models under the sequence batcher, driven by tritonclient over HTTP,
gRPC, the gRPC stream and the asyncio clients (`sequence_calls.py`, the calls Triton's sequence
example clients make) against a real `atoll serve` of examples/sequence_accumulator's models, each
under `oldest` and `direct`. What each assertion holds it to:
- Triton's docs/user_guide/model_configuration.md, "Sequence Batcher": control inputs START, END,
  READY and CORRID (UINT64 or STRING), the Direct and Oldest strategies, implicit state ("the
  state is initialized" at START and each request sees the state the previous one left), and
  max_sequence_idle_microseconds, after which the sequence's slot is released.
- docs/user_guide/architecture.md, "Stateful Models": requests carry a correlation ID and the
  START/END flags; all of a sequence's requests go to the same model instance, in order.
- The example clients' own checks (simple_*_sequence_*_client.py in triton-inference-server/client):
  simple_sequence answers its input, plus 1 at START; simple_dyna_sequence also adds the
  correlation ID at END; simple_string_dyna_sequence sums its inputs and adds the (string) ID at END.
- Triton's error words for a request without a correlation ID and for a sequence never started
  (its sequence batcher's messages).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from onnx import TensorProto, helper
from tests.atoll.client_env import client_python
from tests.atoll.probes import PATIENCE_S

from atoll.supervisor.server_process import ServerProcess

HERE = os.path.dirname(__file__)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sequence_accumulator"
VALUES = [11, 7, 5, 3, 2, 0, 1]
STRATEGIES = {"oldest": 'oldest { max_candidate_sequences: 8 preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 1000 }',
              "direct": "direct { }"}  # fmt: skip


def _variant(root: Path, source: str, name: str, change) -> None:
    """A copy of example model `source` named `name`, its config changed by `change`."""
    shutil.copytree(root / source, root / name)
    config = (root / name / "config.pbtxt").read_text().replace(f'name: "{source}"', f'name: "{name}"')
    (root / name / "config.pbtxt").write_text(change(config))


def _strategy(text: str, strategy: str) -> str:
    lines = [STRATEGIES[strategy] if line.strip().startswith(("oldest", "direct")) else line
             for line in text.splitlines()]  # fmt: skip
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    python = client_python()
    tmp = tmp_path_factory.mktemp("sequences")
    root = tmp / "repo"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("*.onnx", "*.py", "*.md"))
    subprocess.run([sys.executable, str(EXAMPLE / "build.py"), str(root)], check=True)
    _variant(root, "simple_sequence", "simple_sequence_direct", lambda c: _strategy(c, "direct"))
    _variant(root, "accumulator", "accumulator_direct", lambda c: _strategy(c, "direct"))
    _variant(root, "simple_dyna_sequence", "simple_dyna_sequence_oldest", lambda c: _strategy(c, "oldest"))
    _variant(root, "accumulator", "idle", lambda c: c.replace("5000000", "200000"))
    _variant(root, "accumulator", "accumulator_state", lambda c: c.replace(
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]',
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }, '
        '{ name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]'))
    fp32 = root / "fp32_accumulator"
    (fp32 / "1").mkdir(parents=True)
    (fp32 / "1" / "model.onnx").write_bytes(_fp32_accumulator())
    (fp32 / "config.pbtxt").write_text(FP32_CONFIG)
    # the kernel runtime where it can (the FP32 model), onnxruntime for the integer models
    args = ["--repository", str(root), "--backend", "cpu", "--executor", "numpy", "--set", "vgpus.cpu_vgpus=2",
            "--front-ends", "1"]  # fmt: skip
    with ServerProcess(args) as server:
        subprocess.run([python, os.path.join(HERE, "sequence_calls.py"), server.url.removeprefix("http://"),
                        server.grpc_address, str(tmp / "out.json")], check=True, timeout=PATIENCE_S)  # fmt: skip
    return json.loads((tmp / "out.json").read_text())


FP32_CONFIG = """max_batch_size: 8
sequence_batching {
  oldest { max_candidate_sequences: 8 preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 1000 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] } ] }
  ]
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_FP32 dims: [ 1 ] } ]
}
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def _fp32_accumulator() -> bytes:
    """OUTPUT = READY * (INPUT + INPUT_STATE * (1 - START)); OUTPUT_STATE the sum: all FP32, so
    Atoll's own kernel runtime runs it (at built batch sizes: padding rows are not READY)."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    nodes = [helper.make_node("Sub", ["one", "START"], ["going_on"]),
             helper.make_node("Mul", ["INPUT_STATE", "going_on"], ["before"]),
             helper.make_node("Add", ["before", "INPUT"], ["OUTPUT_STATE"]),
             helper.make_node("Mul", ["OUTPUT_STATE", "READY"], ["OUTPUT"])]  # fmt: skip
    tensors = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 1])
               for n in ("INPUT", "START", "READY", "INPUT_STATE")]  # fmt: skip
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 1]) for n in ("OUTPUT", "OUTPUT_STATE")]
    model = helper.make_model(helper.make_graph(nodes, "fp32_accumulator", tensors, outs, [one]),
                              opset_imports=[helper.make_opsetid("", 17)])  # fmt: skip
    model.ir_version = 8
    return model.SerializeToString()


def column(values) -> list:
    return [[[v]] for v in values]


def running_sums(values) -> list:
    return column(itertools.accumulate(values))


ONE_BY_ONE = ("http", "grpc", "stream", "aio_stream")


@pytest.mark.parametrize("model", ["simple_sequence", "simple_sequence_direct"])
@pytest.mark.parametrize("how", ONE_BY_ONE)
def test_simple_sequence_answers_as_the_example_clients_expect(answers, model, how):
    got = answers[f"{model}/{how}"]
    assert got["1000"] == column([1] + VALUES)  # its input, plus 1 at START
    assert got["1001"] == column([101] + [-v for v in VALUES])
    assert got["a-string-id"] == column([21] + [-v for v in VALUES])  # a string ID, no CORRID control


@pytest.mark.parametrize("model", ["accumulator", "accumulator_direct"])
@pytest.mark.parametrize("how", ONE_BY_ONE)
def test_implicit_state_keeps_a_running_sum_per_sequence(answers, model, how):
    got = answers[f"{model}/{how}"]
    assert got["1000"] == running_sums([0] + VALUES)
    assert got["1001"] == running_sums([100] + [-v for v in VALUES])
    assert got["a-string-id"] == running_sums([20] + [-v for v in VALUES])


@pytest.mark.parametrize("model", ["simple_sequence", "simple_sequence_direct", "accumulator", "accumulator_direct"])
@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_concurrent_sequences_batch_together_and_keep_apart(answers, model, transport):
    """Twelve sequences at once over the asyncio clients: more than a vGPU's eight slots, so some
    wait in the backlog for a slot; each still sees only its own state."""
    got = answers[f"{model}/{transport}/aio"]
    for corrid in range(1, 13):
        values = list(range(corrid, corrid + 5))
        want = running_sums(values) if model.startswith("accumulator") else column([values[0] + 1] + values[1:])
        assert got[str(corrid)] == want


@pytest.mark.parametrize("model", ["simple_dyna_sequence", "simple_dyna_sequence_oldest"])
@pytest.mark.parametrize("how", ["http", "grpc", "stream"])
def test_a_uint64_corrid_control_gets_the_correlation_id(answers, model, how):
    got = answers[f"{model}/{how}"]
    assert got["1000"] == column([1] + VALUES[:-1] + [1 + 1000])  # the ID added at END
    assert got["1001"] == column([101] + [-v for v in VALUES[:-1]] + [-1 + 1001])


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_a_string_corrid_control_gets_the_string_id(answers, transport):
    sums = list(itertools.accumulate([20] + [-v for v in VALUES]))
    assert answers[f"simple_string_dyna_sequence/{transport}"]["1002"] == column(sums[:-1] + [sums[-1] + 1002])


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_requests_outside_a_sequence_are_refused_in_tritons_words(answers, transport):
    code = "400" if transport == "http" else "StatusCode.INVALID_ARGUMENT"
    no_id = answers[f"no_id/{transport}"]
    assert no_id["error"] == ("inference request to model 'accumulator' must specify a non-zero or non-empty "
                              "correlation ID") and no_id["status"] == code  # fmt: skip
    not_started = answers[f"not_started/{transport}"]
    assert not_started["error"] == ("inference request for sequence 77 to model 'accumulator' must specify the "
                                    "START flag on the first request of the sequence")  # fmt: skip
    assert not_started["status"] == code
    assert "CONTROL_SEQUENCE_CORRID is UINT64" in answers[f"string_for_uint64/{transport}"]["error"]
    assert "must specify the START flag" in answers["not_started/stream"]["error"]


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_an_idle_sequence_is_released(answers, transport):
    assert answers[f"idle/{transport}/start"] == [[1]]
    assert "sequence 5 to model 'idle' must specify the START flag" in answers[f"idle/{transport}/after"]["error"]


def test_json_tensors_over_http(answers):
    assert answers["accumulator/http_json"] == running_sums([4, 5, 6])


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_a_listed_state_output_is_answered_with_the_state(answers, transport):
    sums = [[[s]] for s in itertools.accumulate([1, 2, 3])]
    assert answers[f"accumulator_state/{transport}"] == [[s, s] for s in sums]


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_a_float_model_on_the_kernel_runtime_keeps_its_sequences_apart(answers, transport):
    got = answers[f"fp32_accumulator/{transport}/aio"]
    for corrid in range(1, 13):
        assert got[str(corrid)] == running_sums(range(corrid, corrid + 5))
