"""Triton's model_warmup read from config.pbtxt (and a JSON config), checked against the model's
inputs, and answered by the config endpoint."""

from __future__ import annotations

import pytest
from tests.atoll.user_models import SIMPLE_CONFIG, SIMPLE_WARMUP, simple, write

from atoll.repository.specs import RepositoryError, load_model
from atoll.repository.warmup import WarmupSample


def test_model_warmup_is_read_and_answered(tmp_path):
    spec = load_model(write(tmp_path, "simple", simple(), SIMPLE_CONFIG + SIMPLE_WARMUP))
    assert spec.warmups == (WarmupSample("pair", 2, (("INPUT0", (16,), "zero_data"),
                                                     ("INPUT1", (16,), "random_data")), 3),)  # fmt: skip
    assert spec.config()["model_warmup"] == [{"name": "pair", "batch_size": 2, "count": 3, "inputs": {
        "INPUT0": {"data_type": "TYPE_INT32", "dims": [16], "zero_data": True},
        "INPUT1": {"data_type": "TYPE_INT32", "dims": [16], "random_data": True}}}]  # fmt: skip
    as_json = load_model(tmp_path / "simple", {"max_batch_size": 8, "model_warmup": [{"batch_size": 1, "inputs": {
        "INPUT0": {"data_type": "TYPE_INT32", "dims": ["16"], "zero_data": True},
        "INPUT1": {"data_type": "TYPE_INT32", "dims": ["16"], "zero_data": True}}}]})  # fmt: skip
    assert as_json.warmups[0].inputs == (("INPUT0", (16,), "zero_data"), ("INPUT1", (16,), "zero_data"))


@pytest.mark.parametrize("change, reason", [
    (("batch_size: 2", "batch_size: 9"), "batch_size 9 must be 1 to 8"),
    (("TYPE_INT32 dims: [ 16 ] zero", "TYPE_FP32 dims: [ 16 ] zero"), "data_type TYPE_FP32 but the input is TYPE_INT32"),
    (("dims: [ 16 ] random", "dims: [ 4 ] random"), "dims [4] do not fit the input's [16]"),
    (("random_data: true", "input_data_file: 'x'"), "give zero_data or random_data"),
    (('key: "INPUT1"', 'key: "INPUT9"'), "input 'INPUT9': the model has no such input"),
])  # fmt: skip
def test_a_warmup_that_does_not_fit_the_model_is_refused(tmp_path, change, reason):
    with pytest.raises(RepositoryError, match="model_warmup 'pair'") as refused:
        load_model(write(tmp_path, "simple", simple(), SIMPLE_CONFIG + SIMPLE_WARMUP.replace(*change)))
    assert reason in str(refused.value)
