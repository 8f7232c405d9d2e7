"""CUDA shared memory end to end (needs a GPU): the test allocates device buffers with CuPy and
hands their IPC handles to the real `tritonclient`, which registers them with `atoll serve` over
HTTP and gRPC; the server reads the input from the device and writes the logits back there."""

from __future__ import annotations

import base64
import json

import numpy as np
import onnxruntime as ort
import pytest
from gpu_runtime.zoo import build
from gpu_runtime.zoo.repository import write_model
from tests.atoll.client_env import run_client

from atoll.supervisor.server_process import ServerProcess

pytestmark = pytest.mark.gpu
MODEL = "mobilenet_v3_small"

CLIENT = r"""
import sys, json, tritonclient.http as httpclient, tritonclient.grpc as grpcclient
http_url, grpc_url, in_handle, out_handle, in_bytes, out_bytes = sys.argv[1:7]
in_bytes, out_bytes = int(in_bytes), int(out_bytes)
http = httpclient.InferenceServerClient(http_url)
for p, module, client in (("http", httpclient, http), ("grpc", grpcclient, grpcclient.InferenceServerClient(grpc_url))):
    client.register_cuda_shared_memory(f"{p}_in", in_handle.encode(), 0, in_bytes)
    client.register_cuda_shared_memory(f"{p}_out", out_handle.encode(), 0, 2 * out_bytes)
    registered = sorted(r["name"] for r in http.get_cuda_shared_memory_status())
    x = module.InferInput("input", [1, 3, 224, 224], "FP32")
    x.set_shared_memory(f"{p}_in", in_bytes)
    y = module.InferRequestedOutput("logits")
    y.set_shared_memory(f"{p}_out", out_bytes, offset=out_bytes if p == "grpc" else 0)
    client.infer("mobilenet_v3_small", [x], outputs=[y])
    client.unregister_cuda_shared_memory()
print(json.dumps(registered))
"""


def test_inputs_and_outputs_in_cuda_shared_memory(tmp_path):
    import cupy  # optional: CuPy, GPU only

    write_model(tmp_path, MODEL, build(MODEL))
    x = np.random.default_rng(3).normal(size=(1, 3, 224, 224)).astype(np.float32)
    runtime = cupy.cuda.runtime
    # raw allocations (not CuPy's pool), so each IPC handle opens at its buffer's first byte
    d_in, d_out = runtime.malloc(x.nbytes), runtime.malloc(2 * 4000)
    try:
        runtime.memcpy(d_in, x.ctypes.data, x.nbytes, runtime.memcpyHostToDevice)
        handles = [base64.b64encode(runtime.ipcGetMemHandle(p)).decode() for p in (d_in, d_out)]
        with ServerProcess(["--repository", str(tmp_path)]) as server:
            registered = json.loads(run_client(CLIENT, server.url.removeprefix("http://"), server.grpc_address,
                                             *handles, str(x.nbytes), "4000"))  # fmt: skip
        assert registered == ["grpc_in", "grpc_out"]  # the last protocol's, seen over HTTP
        out = np.empty(2000, np.float32)
        runtime.memcpy(out.ctypes.data, d_out, out.nbytes, runtime.memcpyDeviceToHost)
    finally:
        runtime.free(d_in)
        runtime.free(d_out)
    want = ort.InferenceSession(str(tmp_path / MODEL / "1" / "model.onnx")).run(None, {"input": x})[0][0]
    for logits in (out[:1000], out[1000:]):  # HTTP wrote the first half, gRPC the second
        np.testing.assert_allclose(logits, want, rtol=1e-3, atol=1e-3)
