"""Acceptance of issue #42 (load, tensors): models that reproduce what kept real trained models
from loading or answering, in folders without config.pbtxt, served by a real `atoll serve` (the
kernel runtime as its executor, so each model's executor is chosen) and answering tritonclient over
HTTP (JSON and binary data), gRPC and system shared memory with onnxruntime's outputs:

- `heights`: valid for some heights only (neither 1 nor 1024): nothing runs at load at a bound;
- `window`, `window_scalar`: a scalar INT64 input with an `If` on its value, sent as the completed
  config says ([1]) and as the graph says ([]), the second with a config that reshapes it and warms
  it up; outputs with two -1 dimensions and a scalar;
- `heatmap`: a detector's [-1, 1, -1, -1] output; `simple_string`, `simple_identity`: BYTES outputs;
  `brain`: BF16 in and out; `simple_int8`.
"""

from __future__ import annotations

import json
import os
import subprocess

import ml_dtypes
import numpy as np
import pytest
from tests.atoll import any_models
from tests.atoll.client_env import client_python
from tests.atoll.probes import PATIENCE_S
from tests.atoll.user_models import SIMPLE_CONFIG, reference, simple, write

from atoll.supervisor.server_process import ServerProcess

HERE = os.path.dirname(__file__)
RNG = np.random.default_rng(42)
AUDIO = RNG.normal(size=12).astype(np.float32)
MODELS = {  # name: (graph, inputs of one request)
    "heights": (any_models.heights(), {"x": RNG.normal(size=(2, 6, 4)).astype(np.float32)}),
    "window": (any_models.window(), {"audio": AUDIO, "size": np.array([4])}),  # as the config says: [1]
    "window_scalar": (any_models.window(), {"audio": AUDIO, "size": np.array(3)}),  # as the graph says: []
    "heatmap": (any_models.heatmap(), {"image": RNG.normal(size=(2, 1, 5, 7)).astype(np.float32)}),
    "simple_string": (any_models.simple_string(), {
        "INPUT0": np.array([[str(i).encode() for i in range(16)], [str(-i).encode() for i in range(16)]]),
        "INPUT1": np.array([[b"3"] * 16, [b"40"] * 16])}),
    "simple_identity": (any_models.simple_identity(), {"INPUT0": np.array([[b"a", b"", "\u00e9t\u00e9".encode()]])}),
    "simple_int8": (any_models.simple_int8(), {"INPUT0": RNG.integers(-50, 50, (2, 16)).astype(np.int8),
                                                "INPUT1": RNG.integers(-50, 50, (2, 16)).astype(np.int8)}),
    "brain": (any_models.brain(), {"x": (RNG.normal(size=(3, 8)) * 4).astype(ml_dtypes.bfloat16).astype(np.float32)}),
}  # fmt: skip
CONFIGS = {  # the others have none: completed from the graph
    "window_scalar": """max_batch_size: 0
input [ { name: "audio" data_type: TYPE_FP32 dims: [ -1 ] },
        { name: "size" data_type: TYPE_INT64 dims: [ 1 ] reshape: { shape: [ ] } } ]
model_warmup [ { name: "silence" batch_size: 1
  inputs { key: "audio" value: { data_type: TYPE_FP32 dims: [ 12 ] random_data: true } }
  inputs { key: "size" value: { data_type: TYPE_INT64 dims: [ 1 ] zero_data: true } } } ]
""",  # the scalar as Triton's users write it, warmed up as the model takes it
}
BF16 = ("brain",)
PATHS = ("http-json", "http-binary", "grpc", "shm")


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    python = client_python()
    tmp = tmp_path_factory.mktemp("any_models")
    root = tmp / "repo"
    for name, (graph, _) in MODELS.items():
        write(root, name, graph, CONFIGS.get(name))
    write(root, "simple", simple(), SIMPLE_CONFIG)
    np.savez(tmp / "in.npz", **{f"{m}/{n}": a for m, (_, arrays) in MODELS.items() for n, a in arrays.items()})
    args = ["--repository", str(root), "--backend", "cpu", "--set", "vgpus.cpu_vgpus=1", "--front-ends", "1",
            "--executor", "numpy", "--model-control-mode", "explicit", "--load-model", "*"]  # fmt: skip
    with ServerProcess(args) as server:
        address = server.url.removeprefix("http://")
        subprocess.run([python, os.path.join(HERE, "user_model_calls.py"), address, server.grpc_address,
                        str(tmp / "in.npz"), str(tmp / "out.npz")],
                       check=True, timeout=PATIENCE_S, env={**os.environ, "BF16": ",".join(BF16)})  # fmt: skip
        subprocess.run([python, os.path.join(HERE, "qa_model_calls.py"), address, server.grpc_address,
                        str(tmp / "qa.json")], check=True, timeout=PATIENCE_S)  # fmt: skip
    assert server.proc.returncode == 0
    return dict(np.load(tmp / "out.npz", allow_pickle=True)), json.loads((tmp / "qa.json").read_text())


def _expected(model: str) -> dict[str, np.ndarray]:
    """onnxruntime's outputs as the protocol gives them: a scalar as [1] (its completed config's
    dims), strings as bytes, BF16 as FP32 (exact), as tritonclient reads them."""
    graph, feeds = MODELS[model]
    feeds = {n: a.reshape(()) if n == "size" else a for n, a in feeds.items()}  # the graph takes a scalar
    if model in BF16:
        shapes = {"y": feeds["x"].shape}
        return {n: a.astype(np.float32) for n, a in any_models.bf16_reference(graph, feeds, shapes).items()}
    return {name: _as_bytes(array.reshape(1) if array.ndim == 0 else array)
            for name, array in reference(graph, feeds).items()}  # fmt: skip


def _as_bytes(array: np.ndarray) -> np.ndarray:
    """Strings as bytes (JSON's BYTES elements reach tritonclient as text); other arrays as they are."""
    if array.dtype != object:
        return array
    return np.vectorize(lambda s: s.encode() if isinstance(s, str) else s, otypes=[object])(array)


@pytest.mark.parametrize("model", MODELS)
def test_every_path_answers_onnxruntimes_outputs(answers, model):
    for path in PATHS if model not in BF16 else PATHS[1:]:  # tritonclient sends no BF16 in JSON
        for name, want in _expected(model).items():
            got = _as_bytes(answers[0][f"{model}/{path}/{name}"])
            assert got.dtype == want.dtype and got.shape == want.shape, (path, name, got.dtype, got.shape)
            assert got.tolist() == want.tolist(), f"{model} {path} {name}"


SUMS, DIFFERENCES = list(range(1, 17)), list(range(-1, 15))  # of 0..15 and 1s


def test_triton_example_calls_on_its_qa_models(answers):
    """The calls of Triton's example clients for `simple`, `simple_string`, `simple_identity` and
    `simple_int8` (qa_model_calls.py): BYTES outputs over every path, typed gRPC contents."""
    qa = answers[1]
    texts = {"OUTPUT0": [str(v) for v in SUMS], "OUTPUT1": [str(v) for v in DIFFERENCES]}
    for name in ("http string binary=False", "http string binary=True", "grpc string", "grpc byte contents"):
        assert qa[name] == {"ok": texts}, name
    assert qa["http identity"] == {"ok": {"OUTPUT0": ["a", "", "\u00e9t\u00e9"]}}
    for name in ("grpc int contents", "grpc int8 contents"):
        assert qa[name] == {"ok": {"OUTPUT0": SUMS, "OUTPUT1": DIFFERENCES}}, name
    assert qa["shm strings read"] == {"ok": [texts["OUTPUT0"], texts["OUTPUT1"]]}  # outputs written in regions
    assert not any("data" in out for out in qa["http shm strings"]["ok"])


def test_protocol_edges_answer_as_triton(answers):
    qa = answers[1]
    assert qa["grpc raw and typed contents"] == {  # Triton's words
        "status": "StatusCode.INVALID_ARGUMENT",
        "message": "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'"}
    for p in ("http", "grpc"):  # no GPU vGPUs: CUDA's registry is empty, and a registration says why not
        assert qa[f"{p} cuda status"] == {"ok": []}
        assert qa[f"{p} cuda unregister all"] == qa[f"{p} cuda unregister one"] == {"ok": None}
        assert "this server has no GPU vGPUs (use system shared memory)" in qa[f"{p} cuda register"]["message"]
        # a file name the file system refuses: Triton's status and words, no exception type or server path
        long_name = qa[f"{p} load long file name"]
        assert long_name["status"] == {"http": "500", "grpc": "StatusCode.INTERNAL"}[p]
        assert long_name["message"] == "failed to load 'simple': failed to poll from model repository (File name too long)"
        assert qa[f"{p} live after"] == qa[f"{p} simple still ready"] == {"ok": True}
