"""tritonclient calls for test_rt_e2e.py (run in the client environment):
    python rt_calls.py HTTP_ADDRESS GRPC_ADDRESS OUT.json
What the server answered is written to OUT.json for the test to check."""

import json
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

HTTP, GRPC, OUT = sys.argv[1:4]
http = httpclient.InferenceServerClient(HTTP, concurrency=4, network_timeout=60)
grpc = grpcclient.InferenceServerClient(GRPC)
X = np.arange(4, dtype=np.float32).reshape(1, 4)
out = {}


def request():
    tensor = httpclient.InferInput("x", [1, 4], "FP32")
    tensor.set_data_from_numpy(X)
    return [tensor]


def bound(transport):
    if transport == "http":
        parameters = http.get_model_config("rt-fast")["parameters"]
    else:
        parameters = grpc.get_model_config("rt-fast", as_json=True)["config"]["parameters"]
    return parameters.get("atoll.rt.bound_ms", {}).get("string_value")


out["bound"] = {t: bound(t) for t in ("http", "grpc")}
# Best-effort load beside a real-time client sending far faster than its envelope (burst 2, one
# each 10 s): every request is answered, the rows beyond the envelope run as best-effort work.
be = [http.async_infer("be-load", request()) for _ in range(20)]
out["rt_answers"] = [http.infer("rt-fast", request(), priority=1).as_numpy("y").tolist() for _ in range(8)]
out["be_answers"] = [r.get_result().as_numpy("y").tolist() for r in be]
try:
    http.load_model("rt-greedy")
    out["refused"] = None
except InferenceServerException as exc:
    out["refused"] = exc.message()
out["greedy_ready"] = http.is_model_ready("rt-greedy")
out["bound_after"] = bound("http")
with open(OUT, "w") as f:
    json.dump(out, f)
