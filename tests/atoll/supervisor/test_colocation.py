"""Which models the front ends run themselves (`supervisor/colocation.py`): plain onnxruntime
models on CPU vGPUs only; every model whose semantics live in the dispatcher keeps its path."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from batching.queue_policy import QueuePolicies
from batching.sequence import SequenceSettings

from atoll.repository.specs import ModelSpec, TensorSpec
from atoll.supervisor.colocation import reason_not

ORT = "onnxruntime"


def _spec(**changes) -> ModelSpec:
    spec = ModelSpec("m", "1", Path("m.onnx"), "onnxruntime_onnx", 8, [TensorSpec("x", "FP32", (4,))],
                     [TensorSpec("y", "FP32", (2,))], "none", "")  # fmt: skip
    return dataclasses.replace(spec, **changes)


def test_a_plain_onnxruntime_model_on_cpu_vgpus_runs_in_the_front_ends():
    assert reason_not(_spec(), ORT, ["cpu", "cpu"], "auto") == ""
    assert reason_not(_spec(preprocess="image", raw_input="image"), ORT, ["cpu"], "auto") == ""


@pytest.mark.parametrize(("spec", "executor", "kinds", "mode", "why"), [
    (_spec(), ORT, ["cpu"], "off", "server.colocate is off"),
    (_spec(), ORT, ["cpu", "mig"], "auto", "not every vGPU"),
    (_spec(), ORT, [], "auto", "not every vGPU"),
    (_spec(), "numpy", ["cpu"], "auto", "runs on numpy"),
    (_spec(max_batch_size=0), ORT, ["cpu"], "auto", "max_batch_size 0"),
    (_spec(preprocess="audio", raw_input="audio"), ORT, ["cpu"], "auto", "padded to buckets"),
    (_spec(parameters={"atoll.pad_dynamic": "true"}), ORT, ["cpu"], "auto", "pad_dynamic"),
    (_spec(preprocess="image", raw_input="image", inputs=[TensorSpec("x", "FP16", (3, 8, 8))]), ORT, ["cpu"], "auto",
     "not FP32"),
    (_spec(queue_policies=QueuePolicies(priority_levels=2, default_priority_level=2)), ORT, ["cpu"], "auto",
     "queue policies"),
    (_spec(inputs=[TensorSpec("x", "BYTES", (1,))]), ORT, ["cpu"], "auto", "BYTES/BF16"),
    (_spec(outputs=[TensorSpec("y", "BF16", (2,))]), ORT, ["cpu"], "auto", "BYTES/BF16"),
    (_spec(sequence=SequenceSettings()), ORT, ["cpu"], "auto", "stateful"),
])  # fmt: skip
def test_what_keeps_the_dispatchers_path(spec, executor, kinds, mode, why):
    assert why in reason_not(spec, executor, kinds, mode)
