"""`atoll bench serve --python-identity`: its repository (the same identity in Python and ONNX),
Triton serving that very model.py through its python backend (real tritonserver where
nvidia-pytriton is installed, skipped elsewhere), and the options it refuses."""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import pytest

from atoll.bench import python_identity, triton_baseline, triton_sweep
from atoll.bench.bodies import tensor_body
from atoll.cli import build_parser
from atoll.kserve.protocol import HEADER_LENGTH
from atoll.repository.specs import load_repository


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return python_identity.write(tmp_path_factory.mktemp("identity"))


def test_both_models_are_the_same_identity(repository):
    models = load_repository(repository)
    py, onnx = models[python_identity.PYTHON], models[python_identity.ONNX]
    assert py.python is not None and onnx.python is None
    for spec in (py, onnx):
        assert spec.preprocess == "image" and spec.max_batch_size == 8
        assert [(t.name, t.dims) for t in spec.inputs] == [("INPUT", python_identity.DIMS)]
        assert [(t.name, t.dims) for t in spec.outputs] == [("OUTPUT", python_identity.DIMS)]


def test_triton_serves_the_python_model_as_itself(repository, tmp_path):
    settings = triton_baseline.TritonSettings(2, queue_delay_us=0)
    triton_baseline.write_repository(str(repository), tmp_path, settings, python_identity.TRITON_MODELS)
    assert [p.name for p in tmp_path.iterdir()] == [python_identity.PYTHON]  # no stubs for what is not driven
    ident = tmp_path / python_identity.PYTHON
    assert (ident / "1" / "model.py").read_bytes() == python_identity.SOURCE.read_bytes()
    config = (ident / "config.pbtxt").read_text()
    assert 'backend: "python"' in config and "count: 2 kind: KIND_CPU" in config
    assert 'name: "INPUT" data_type: TYPE_FP32 dims: [ 3, 224, 224 ]' in config and "optional" not in config


def test_python_identity_brings_its_own_repository(repository):
    args = build_parser().parse_args(["bench", "serve", "--python-identity", "--repository", str(repository)])
    assert args.func(args) == 2


def test_tritons_python_backend_answers_the_input(repository):
    """Real tritonserver where nvidia-pytriton is installed; a change of the instance count alone
    keeps the instance there was (what triton_sweep.apply waits for)."""
    try:
        triton_baseline.triton_home()
    except triton_baseline.TritonUnavailable as exc:
        pytest.skip(str(exc))
    x = np.random.default_rng(43).standard_normal((2, *python_identity.DIMS)).astype(np.float32)
    specs = {python_identity.PYTHON: load_repository(repository)[python_identity.PYTHON]}
    with triton_baseline.server(str(repository), (1,), triton_sweep.SERVER_OPTIONS,
                                python_identity.TRITON_MODELS) as system:  # fmt: skip
        triton_sweep.apply(system, specs, triton_baseline.TritonSettings(1, queue_delay_us=0))
        before = triton_sweep._stubs(system, specs)
        assert len(before) == 1
        triton_sweep.apply(system, specs, triton_baseline.TritonSettings(2, queue_delay_us=0))
        after = triton_sweep._stubs(system, specs)
        assert len(after) == 2 and before < after
        body, headers = tensor_body("INPUT", x)
        url = f"{system.url}/v2/models/{python_identity.PYTHON}/infer"
        with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=120) as reply:
            payload, head = reply.read(), int(reply.headers[HEADER_LENGTH])
    assert json.loads(payload[:head])["outputs"][0]["shape"] == [2, *python_identity.DIMS]
    np.testing.assert_array_equal(np.frombuffer(payload[head:], dtype=np.float32).reshape(x.shape), x)
