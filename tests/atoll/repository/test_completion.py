"""Configs completed from the ONNX graph as Triton does without --strict-model-config, and configs
that contradict the graph refused with both sides named."""

from __future__ import annotations

import pytest
from onnx import TensorProto
from tests.atoll.user_models import SIMPLE_CONFIG, signature, simple, write

from atoll.repository.completion import DEFAULT_MAX_BATCH_SIZE
from atoll.repository.specs import RepositoryError, TensorSpec, load_model

INT32 = TensorProto.INT32


def test_a_folder_without_config_is_served_from_its_graph(tmp_path):
    spec = load_model(write(tmp_path, "simple", simple(), None))
    assert spec.max_batch_size == DEFAULT_MAX_BATCH_SIZE == 4  # Triton's default-max-batch-size
    assert spec.inputs == [TensorSpec("INPUT0", "INT32", (16,)), TensorSpec("INPUT1", "INT32", (16,))]
    assert spec.outputs == [TensorSpec("OUTPUT0", "INT32", (16,)), TensorSpec("OUTPUT1", "INT32", (16,))]
    config = spec.config()
    assert config["max_batch_size"] == 4
    assert config["input"][1] == {"name": "INPUT1", "data_type": "TYPE_INT32", "dims": [16]}
    assert spec.metadata()["outputs"][0] == {"name": "OUTPUT0", "datatype": "INT32", "shape": [-1, 16]}


def test_a_graph_without_a_batch_dimension_is_not_batched(tmp_path):
    model = signature({"x": (TensorProto.FLOAT16, [4, 16]), "mask": (TensorProto.BOOL, [4, "seq"])},
                      {"y": (TensorProto.FLOAT16, [4, 16])})
    spec = load_model(write(tmp_path, "m", model, None))
    assert spec.max_batch_size == 0
    assert spec.inputs == [TensorSpec("x", "FP16", (4, 16)), TensorSpec("mask", "BOOL", (4, -1))]


def test_a_config_completes_only_what_it_leaves_out(tmp_path):
    bert = signature({n: (TensorProto.INT64, ["batch", "seq"]) for n in ("ids", "mask", "types")},
                     {"start": (TensorProto.FLOAT, ["batch", "seq"]), "end": (TensorProto.FLOAT, ["batch", "seq"])})
    spec = load_model(write(tmp_path, "bert", bert, 'max_batch_size: 8\noutput [ { name: "end" data_type: TYPE_FP32 '
                                                    'dims: [ -1 ] } ]'))
    assert spec.max_batch_size == 8
    assert [t.dims for t in spec.inputs] == [(-1,)] * 3 and [t.datatype for t in spec.inputs] == ["INT64"] * 3
    assert spec.outputs == [TensorSpec("end", "FP32", (-1,))]  # a subset of the outputs, as listed
    whole = 'input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 16 ] } ]'  # the full rank: no batching
    spec = load_model(write(tmp_path, "whole", signature({"x": (TensorProto.FLOAT, ["n", 16])},
                                                         {"y": (TensorProto.FLOAT, ["n", 16])}), whole))
    assert spec.max_batch_size == 0 and spec.inputs == [TensorSpec("x", "FP32", (-1, 16))]


@pytest.mark.parametrize("change, both_sides", [
    (("TYPE_INT32 dims: [ 16 ] },\n", "TYPE_INT64 dims: [ 16 ] },\n"), ("'INPUT0' is INT64 in config.pbtxt but INT32",)),
    (('OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]', 'OUTPUT1" data_type: TYPE_INT32 dims: [ 8 ]'),
     ("'OUTPUT1' has dims [8] in config.pbtxt but [16] (after the batch dimension) in the graph",)),
    (('name: "INPUT1"', 'name: "INPUT2"'), ("input 'INPUT2' is not in the graph", "INPUT0, INPUT1")),
    (("dims: [ 16 ] },\n", "dims: [ 1, 16 ] },\n"), ("'INPUT0' has dims [1, 16] in config.pbtxt but [16]",)),
])  # fmt: skip
def test_a_config_contradicting_the_graph_is_refused_naming_both_sides(tmp_path, change, both_sides):
    folder = write(tmp_path, "simple", simple(), SIMPLE_CONFIG.replace(*change, 1))
    with pytest.raises(RepositoryError) as refused:
        load_model(folder)
    for text in both_sides:
        assert text in str(refused.value)


def test_batching_a_graph_without_a_batch_dimension_is_refused(tmp_path):
    model = signature({"x": (TensorProto.FLOAT, [4, 16])}, {"y": (TensorProto.FLOAT, [4, 16])})
    with pytest.raises(RepositoryError, match=r"max_batch_size 8, but the graph's 'x' has shape \[4, 16\]"):
        load_model(write(tmp_path, "m", model, 'max_batch_size: 8'))


def test_a_graph_input_missing_from_the_config_and_an_unreadable_file_are_refused(tmp_path):
    only_one = SIMPLE_CONFIG.replace(',\n        { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }', "")
    with pytest.raises(RepositoryError, match=r"graph input\(s\) INPUT1 not listed in config.pbtxt"):
        load_model(write(tmp_path, "simple", simple(), only_one))
    with pytest.raises(RepositoryError, match="model.onnx is not a readable ONNX model"):
        load_model(write(tmp_path, "corrupt", b"\x08\x07 not a graph", None))


def test_a_json_config_reads_as_config_pbtxt_does(tmp_path):
    folder = write(tmp_path, "simple", simple(), None)
    spec = load_model(folder, {"max_batch_size": 2, "input": [
        {"name": "INPUT0", "data_type": "TYPE_INT32", "dims": ["16"]},
        {"name": "INPUT1", "data_type": "TYPE_INT32", "dims": ["16"]}],
        "parameters": {"atoll.note": {"string_value": "json"}}})  # fmt: skip
    assert spec.max_batch_size == 2 and spec.inputs[0].dims == (16,) and spec.parameters == {"atoll.note": "json"}
    assert [t.name for t in spec.outputs] == ["OUTPUT0", "OUTPUT1"]


def test_scalars_are_completed_as_tritons_onnx_runtime_backend_completes_them(tmp_path):
    """A rank-0 tensor (or a batched model's [batch] alone): dims [1], reshape [] (every input and
    output has dims); a config may say so itself, and is checked against the graph by its reshape."""
    model = signature({"n": (TensorProto.INT64, []), "x": (TensorProto.FLOAT, ["len"])}, {"y": (TensorProto.INT64, [])})
    spec = load_model(write(tmp_path, "m", model, None))
    assert spec.max_batch_size == 0
    assert spec.inputs[0] == TensorSpec("n", "INT64", (1,), None, ()) and spec.inputs[1].reshape is None
    assert spec.outputs == [TensorSpec("y", "INT64", (1,), None, ())]
    assert spec.config()["input"][0] == {"name": "n", "data_type": "TYPE_INT64", "dims": [1], "reshape": {"shape": []}}
    assert spec.metadata()["inputs"][0] == {"name": "n", "datatype": "INT64", "shape": [1]}
    batched = signature({"ids": (TensorProto.INT64, ["batch"])}, {"out": (TensorProto.INT64, ["batch"])})
    assert load_model(write(tmp_path, "b", batched, None)).inputs == [TensorSpec("ids", "INT64", (1,), None, ())]
    said = 'max_batch_size: 0\ninput [ { name: "n" data_type: TYPE_INT64 dims: [ 1 ] reshape: { shape: [ ] } },\n' \
           '        { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]'
    assert load_model(write(tmp_path, "said", model, said)).inputs[0].reshape == ()
    with pytest.raises(RepositoryError, match=r"input 'n' has dims \[1\] in config.pbtxt but \[\] in the graph"):
        load_model(write(tmp_path, "unsaid", model, said.replace(" reshape: { shape: [ ] }", "")))
