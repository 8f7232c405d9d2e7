"""tritonclient calls on the models of test_instance_groups.py (run in the client environment):
    python instance_group_calls.py HTTP_ADDRESS GRPC_ADDRESS OUT.json
What the server answered is written to OUT.json, keyed by `<transport>/<what>`."""

import json
import sys
import threading

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format

HTTP, GRPC, OUT = sys.argv[1:4]
TIMEOUT_S = 60
CONCURRENT = 8
http = httpclient.InferenceServerClient(HTTP, concurrency=CONCURRENT, network_timeout=TIMEOUT_S)
grpc = grpcclient.InferenceServerClient(GRPC)
out = {}


def as_dict(message):
    return message if isinstance(message, dict) else json_format.MessageToDict(message, preserving_proto_field_name=True)


def inputs(module, row):
    tensor = module.InferInput("x", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), row, np.float32))
    return [tensor]


def http_at_once(model):
    """CONCURRENT one-row requests (row i all i) sent before any answer is read; their `y`s."""
    pending = [http.async_infer(model, inputs(httpclient, i)) for i in range(CONCURRENT)]
    return [p.get_result().as_numpy("y").tolist() for p in pending]


def grpc_at_once(model):
    answers, done = [None] * CONCURRENT, threading.Semaphore(0)
    for i in range(CONCURRENT):
        def callback(result, error, i=i):
            answers[i] = error.message() if error is not None else result.as_numpy("y").tolist()
            done.release()
        grpc.async_infer(model, inputs(grpcclient, i), callback, client_timeout=TIMEOUT_S)
    for _ in range(CONCURRENT):
        done.acquire(timeout=TIMEOUT_S)
    return answers


out["index"] = [(m["name"], m.get("state"), m.get("reason")) for m in http.get_model_repository_index()]
for transport, client in (("http", http), ("grpc", grpc)):
    for model in ("pair", "cpu_default", "auto"):
        config = as_dict(client.get_model_config(model))
        out[f"{transport}/{model}/config"] = config.get("config", config).get("instance_group")
out["http/pair"] = http_at_once("pair")
out["grpc/pair"] = grpc_at_once("pair")
out["http/auto"] = http_at_once("auto")
stats = as_dict(http.get_inference_statistics("pair"))["model_stats"][0]
out["pair/stats"] = {"success": int(stats["inference_stats"]["success"]["count"]),
                     "inferences": int(stats["inference_count"])}
with open(OUT, "w") as f:
    json.dump(out, f)
