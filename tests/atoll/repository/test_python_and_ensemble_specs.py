"""Python-backend models and ensembles as the repository reads them (issue #43): what their
config.pbtxt gives, and the mistakes refused at load with their reason."""

from __future__ import annotations

import pytest

from atoll.repository.ensembles import order
from atoll.repository.specs import RepositoryError, load_model

TENSORS = """input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def folder(tmp_path, name: str, config: str, file: str | None = "model.py"):
    (tmp_path / name / "1").mkdir(parents=True)
    (tmp_path / name / "config.pbtxt").write_text(f'name: "{name}"\n{config}')
    if file:
        (tmp_path / name / "1" / file).write_text("class TritonPythonModel:\n    pass\n")
    return tmp_path / name


def test_a_python_model_reads_its_instances_policy_and_timeout(tmp_path):
    spec = load_model(folder(tmp_path, "m", 'backend: "python"\nmax_batch_size: 4\n' + TENSORS + """
instance_group [ { count: 2 kind: KIND_CPU }, { count: 1 kind: KIND_GPU } ]
model_transaction_policy { decoupled: true }
parameters { key: "atoll.execute_timeout_s" value { string_value: "2.5" } }"""))
    assert (spec.python.instances, spec.python.decoupled, spec.python.execute_timeout_s) == (3, True, 2.5)
    assert spec.python.file.name == "model.py" and spec.version == "1" and spec.max_batch_size == 4
    assert [t.name for t in spec.inputs] == ["A"] and [t.name for t in spec.outputs] == ["B"]


def test_a_python_model_defaults_to_one_instance_unbatched(tmp_path):
    spec = load_model(folder(tmp_path, "m", 'backend: "python"\n' + TENSORS))
    assert (spec.python.instances, spec.python.decoupled, spec.max_batch_size) == (1, False, 0)


@pytest.mark.parametrize("config, reason", [
    ('backend: "python"\noutput [ { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]', "must list its inputs"),
    ('backend: "python"\n' + TENSORS + 'parameters { key: "atoll.execute_timeout_s" value { string_value: "0" } }',
     "atoll.execute_timeout_s"),
    ('backend: "python"\n' + TENSORS + "instance_group [ { count: 0 } ]", "instance_group count"),
])  # fmt: skip
def test_a_python_model_config_that_cannot_be_served_is_refused(tmp_path, config, reason):
    with pytest.raises(RepositoryError, match=reason):
        load_model(folder(tmp_path, "m", config))


def test_a_python_model_needs_its_model_py(tmp_path):
    with pytest.raises(RepositoryError, match="model.py"):
        load_model(folder(tmp_path, "m", 'backend: "python"\n' + TENSORS, file=None))


def ensemble(steps: str, outputs: str = 'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]') -> str:
    return f"""platform: "ensemble"
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
{outputs}
ensemble_scheduling {{ step [ {steps} ] }}"""


def step(model: str, reads: str, makes: str, version: int = -1) -> str:
    return (f'{{ model_name: "{model}" model_version: {version} input_map {{ key: "x" value: "{reads}" }} '
            f'output_map {{ key: "y" value: "{makes}" }} }}')  # fmt: skip


def test_an_ensemble_reads_its_steps_and_orders_them_in_waves(tmp_path):
    steps = ", ".join([step("post", "mid", "OUT"), step("pre", "IN", "mid", version=2), step("side", "IN", "other")])
    spec = load_model(folder(tmp_path, "e", ensemble(steps), file=None))
    assert [(s.model_name, s.model_version) for s in spec.ensemble.steps] == [("post", ""), ("pre", "2"), ("side", "")]
    assert spec.ensemble.steps[1].input_map == (("x", "IN"),) and spec.ensemble.steps[1].output_map == (("y", "mid"),)
    assert order(spec.ensemble, ["IN"]) == [[1, 2], [0]]
    assert spec.python is None and spec.version == "1"


@pytest.mark.parametrize("steps, reason", [
    ("", "at least one step"),
    (step("a", "nowhere", "OUT"), "reads nowhere, which no step makes"),
    (step("a", "IN", "mid"), "no step makes ensemble output"),
    (", ".join([step("a", "IN", "OUT"), step("b", "IN", "OUT")]), "'OUT' is made twice"),
    (", ".join([step("a", "t2", "t1"), step("b", "t1", "t2"), step("c", "IN", "OUT")]), "cycle"),
])  # fmt: skip
def test_an_ensemble_that_is_no_dag_is_refused(tmp_path, steps, reason):
    with pytest.raises(RepositoryError, match=reason):
        load_model(folder(tmp_path, "e", ensemble(steps), file=None))
