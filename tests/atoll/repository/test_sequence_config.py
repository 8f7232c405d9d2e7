"""`sequence_batching` read from config.pbtxt (atoll/repository/specs.py): the graph's control and
state inputs (and state outputs) are the server's, not the requests'; a config that contradicts the
graph or Triton's rules is refused with a reason (Triton's model_configuration.md, "Sequence
Batcher"; implicit_state_management.md: a state output the config lists can be requested)."""

from __future__ import annotations

import json
import runpy
import shutil
from pathlib import Path

import pytest
from batching.sequence import read_sequence_batching

from atoll.repository.specs import TYPES, RepositoryError, load_model, load_repository

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "sequence_accumulator"


@pytest.fixture
def repository(tmp_path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("*.onnx", "*.py", "*.md"))
    runpy.run_path(str(EXAMPLE / "build.py"))["build"](root)
    return root


def test_requests_send_only_what_the_config_lists(repository):
    models = load_repository(repository)
    for name in ("simple_sequence", "simple_dyna_sequence", "simple_string_dyna_sequence", "accumulator"):
        spec = models[name]
        assert [t.name for t in spec.inputs] == ["INPUT"] and [t.name for t in spec.outputs] == ["OUTPUT"]
    assert models["simple_string_dyna_sequence"].sequence.model_inputs == ("END", "READY", "CORRID", "INPUT_STATE")
    assert models["accumulator"].sequence.strategy == "oldest"
    assert models["accumulator"].sequence.model_inputs == ("START", "READY", "INPUT_STATE")


def test_the_config_endpoint_answers_what_was_read(repository):
    spec = load_repository(repository)["simple_string_dyna_sequence"]
    config = json.loads(json.dumps(spec.config()))
    assert "dynamic_batching" not in config
    assert read_sequence_batching(config["sequence_batching"], TYPES) == spec.sequence


def test_a_listed_state_output_is_answered(repository):
    folder = repository / "accumulator"
    text = (folder / "config.pbtxt").read_text().replace(
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]',
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }, '
        '{ name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]')
    (folder / "config.pbtxt").write_text(text)
    assert [t.name for t in load_model(folder).outputs] == ["OUTPUT", "OUTPUT_STATE"]


@pytest.mark.parametrize("change, words", [
    (lambda c: c.replace('name: "READY"', 'name: "GO"'), "sequence_batching input 'GO' is not in the graph"),
    (lambda c: c.replace("int32_false_true", "fp32_false_true"), "'START' is FP32 in config.pbtxt but INT32"),
    (lambda c: c + "dynamic_batching { }\n", "dynamic_batching or sequence_batching, not both"),
    (lambda c: c.replace('output_name: "OUTPUT_STATE"', 'output_name: "NONE"'), "output 'NONE' is not in the graph"),
])  # fmt: skip
def test_a_config_that_contradicts_the_graph_is_refused(repository, change, words):
    folder = repository / "accumulator"
    (folder / "config.pbtxt").write_text(change((folder / "config.pbtxt").read_text()))
    with pytest.raises(RepositoryError, match=words):
        load_model(folder)
