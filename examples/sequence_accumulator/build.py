"""Write the ONNX graphs of the stateful example models beside their config.pbtxt files.

    python examples/sequence_accumulator/build.py [REPOSITORY]

REPOSITORY (default: this folder) holds one folder per model with its config.pbtxt; each gets
`1/model.onnx`. The graphs are what Triton's sequence example clients (simple_*_sequence_*_client.py
in triton-inference-server/client) expect of the models they name:
- simple_sequence: OUTPUT = INPUT, plus 1 on a sequence's START request (controls START and READY);
- simple_dyna_sequence: the same, plus the correlation ID (a UINT64 CORRID control) on its END request;
- simple_string_dyna_sequence: a running sum of INPUT per sequence (implicit state), plus the
  correlation ID, a string holding an integer (a STRING CORRID control), on the END request;
- accumulator: a running sum of INPUT per sequence, kept as implicit state, restarted at START
  (controls START and READY).
Rows that are not READY (padding) answer 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

from onnx import TensorProto, helper

INT32, UINT64, STRING = TensorProto.INT32, TensorProto.UINT64, TensorProto.STRING


def _model(nodes, inputs: dict[str, int], outputs: tuple[str, ...], constants=()) -> bytes:
    """A graph over [batch, 1] tensors: `inputs` by name and element type; int32 `outputs`."""
    graph = helper.make_graph(nodes, "sequence",
                              [helper.make_tensor_value_info(n, t, ["batch", 1]) for n, t in inputs.items()],
                              [helper.make_tensor_value_info(n, INT32, ["batch", 1]) for n in outputs],
                              list(constants))  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _node(op: str, inputs: list[str], output: str, **attrs):
    return helper.make_node(op, inputs, [output], **attrs)


def simple_sequence() -> bytes:
    return _model([_node("Add", ["INPUT", "START"], "sum"), _node("Mul", ["sum", "READY"], "OUTPUT")],
                  {"INPUT": INT32, "START": INT32, "READY": INT32}, ("OUTPUT",))  # fmt: skip


def simple_dyna_sequence() -> bytes:
    return _model([_node("Cast", ["CORRID"], "corrid", to=INT32), _node("Mul", ["corrid", "END"], "at_end"),
                   _node("Add", ["INPUT", "START"], "started"), _node("Add", ["started", "at_end"], "sum"),
                   _node("Mul", ["sum", "READY"], "OUTPUT")],
                  {"INPUT": INT32, "START": INT32, "END": INT32, "READY": INT32, "CORRID": UINT64}, ("OUTPUT",))  # fmt: skip


def simple_string_dyna_sequence() -> bytes:
    return _model([_node("Add", ["INPUT_STATE", "INPUT"], "OUTPUT_STATE"),
                   _node("Cast", ["CORRID"], "corrid", to=INT32), _node("Mul", ["corrid", "END"], "at_end"),
                   _node("Add", ["OUTPUT_STATE", "at_end"], "sum"), _node("Mul", ["sum", "READY"], "OUTPUT")],
                  {"INPUT": INT32, "END": INT32, "READY": INT32, "CORRID": STRING, "INPUT_STATE": INT32},
                  ("OUTPUT", "OUTPUT_STATE"))  # fmt: skip


def accumulator() -> bytes:
    # the state is zero at START already; the graph also drops it at START, as a model keeping its
    # own state would (Triton's QA accumulators read START and READY the same way)
    one = helper.make_tensor("one", INT32, [], [1])
    return _model([_node("Sub", ["one", "START"], "going_on"), _node("Mul", ["INPUT_STATE", "going_on"], "before"),
                   _node("Add", ["before", "INPUT"], "OUTPUT_STATE"), _node("Mul", ["OUTPUT_STATE", "READY"], "OUTPUT")],
                  {"INPUT": INT32, "START": INT32, "READY": INT32, "INPUT_STATE": INT32}, ("OUTPUT", "OUTPUT_STATE"),
                  [one])  # fmt: skip


MODELS = {"simple_sequence": simple_sequence, "simple_dyna_sequence": simple_dyna_sequence,
          "simple_string_dyna_sequence": simple_string_dyna_sequence, "accumulator": accumulator}  # fmt: skip


def build(repository: Path) -> None:
    """Write `<model>/1/model.onnx` for every model folder of `repository` named in MODELS."""
    for name, make in MODELS.items():
        if (repository / name / "config.pbtxt").is_file():
            (repository / name / "1").mkdir(exist_ok=True)
            (repository / name / "1" / "model.onnx").write_bytes(make())


if __name__ == "__main__":
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
