"""tritonclient calls on the Python-backend models of models.py (run in the client environment by
test_python_models.py): python client_calls.py HTTP_ADDRESS GRPC_ADDRESS JPEG OUT.npy; prints one
JSON object of what came back, the test asserts on it (OUT.npy: a media model's answer to JPEG)."""

import asyncio
import json
import os
import queue
import signal
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

HTTP, GRPC, JPEG, IMAGE_OUT = sys.argv[1:5]
http = httpclient.InferenceServerClient(HTTP, concurrency=16)
grpc = grpcclient.InferenceServerClient(GRPC)
A, B = np.arange(4, dtype=np.float32), np.full(4, 0.5, np.float32)
out = {}


def tensors(module, arrays):
    made = []
    for name, array in arrays.items():
        t = module.InferInput(name, list(array.shape), "BYTES" if array.dtype == object else
                              {"float32": "FP32", "int32": "INT32", "uint8": "UINT8"}[array.dtype.name])
        t.set_data_from_numpy(array)
        made.append(t)
    return made


def pair(result):
    return [result.as_numpy("OUTPUT0").tolist(), result.as_numpy("OUTPUT1").tolist()]


def error_of(call):
    try:
        call()
    except InferenceServerException as exc:
        return exc.message()
    return None


# add_sub, as Triton's example client calls it: HTTP, gRPC, the gRPC stream
out["http"] = pair(http.infer("add_sub", tensors(httpclient, {"INPUT0": A, "INPUT1": B})))
out["grpc"] = pair(grpc.infer("add_sub", tensors(grpcclient, {"INPUT0": A, "INPUT1": B})))
answers = queue.Queue()
grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
grpc.async_stream_infer("add_sub", tensors(grpcclient, {"INPUT0": A, "INPUT1": B}))
result, error = answers.get(timeout=60)
out["stream"] = pair(result) if error is None else str(error)

# 16 concurrent one-row requests to a batching model with 2 instances
rows = [np.full((1, 4), i, np.float32) for i in range(16)]
pending = [http.async_infer("add_sub_batched", tensors(httpclient, {"INPUT0": r, "INPUT1": r})) for r in rows]
out["batched"] = [p.get_result().as_numpy("OUTPUT0").tolist() for p in pending]

# BLS: the bls model calls add_sub (exec and async_exec) and answers its outputs
name = np.array([b"add_sub"], dtype=object)
out["bls"] = pair(http.infer("bls", tensors(httpclient, {"MODEL_NAME": name, "INPUT0": A, "INPUT1": B})))
out["bls_error"] = error_of(lambda: http.infer("bls", tensors(httpclient, {
    "MODEL_NAME": np.array([b"no_such_model"], dtype=object), "INPUT0": A, "INPUT1": B})))

# decoupled: several responses to one request over the gRPC stream; refused over HTTP
grpc.async_stream_infer("repeat", tensors(grpcclient, {"IN": np.array([4, 5, 6], np.int32)}))
out["repeat"] = []
for _ in range(3):
    result, error = answers.get(timeout=60)
    out["repeat"].append([result.as_numpy("OUT").tolist(), result.as_numpy("IDX").tolist()] if error is None
                         else str(error))
grpc.async_stream_infer("add_sub", tensors(grpcclient, {"INPUT0": A, "INPUT1": B}))  # the stream serves on
result, error = answers.get(timeout=60)
out["after_repeat"] = pair(result) if error is None else str(error)
grpc.stop_stream()


async def repeat_async():
    """The decoupled model over tritonclient's asyncio gRPC stream, two requests on it."""
    client = grpcaio.InferenceServerClient(GRPC)

    async def requests():
        for values in ([7, 8], [9]):
            yield {"model_name": "repeat", "inputs": tensors(grpcclient, {"IN": np.array(values, np.int32)}),
                   "request_id": str(values[0])}

    got = []
    async for result, error in client.stream_infer(requests()):
        got.append(str(error) if error is not None else
                   [result.get_response().id, result.as_numpy("OUT").tolist(), result.as_numpy("IDX").tolist()])
        if len(got) == 3:
            break
    await client.close()
    return sorted(got)


out["repeat_aio"] = asyncio.run(repeat_async())
out["repeat_http"] = error_of(lambda: http.infer("repeat", tensors(httpclient, {"IN": np.array([1], np.int32)})))


# containment: raise, hang, die; each followed by a request answered by the restarted instance
def faulty(mode):
    return http.infer("faulty", tensors(httpclient, {"MODE": np.array([mode], np.int32)})).as_numpy("ECHO").tolist()


out["faults"] = []
for mode in (1, 2, 3):
    out["faults"].append([error_of(lambda: faulty(mode)), faulty(0), pair(http.infer(
        "add_sub", tensors(httpclient, {"INPUT0": A, "INPUT1": B})))])
# ensembles: Python pre-processing + ONNX + Python top-k, over HTTP and gRPC; a failing step named
raw = np.stack([np.arange(16, dtype=np.uint8) * (i + 1) for i in range(2)])
for path, module, client in (("http", httpclient, http), ("grpc", grpcclient, grpc)):
    result = client.infer("pipeline", tensors(module, {"RAW": raw}))
    out[f"pipeline_{path}"] = [result.as_numpy(n).tolist() for n in ("TOPK_INDICES", "TOPK_SCORES", "DOUBLED")]
out["broken"] = error_of(lambda: http.infer("broken", tensors(httpclient, {"MODE": np.array([1], np.int32)})))
out["composing"] = {m: http.get_inference_statistics(m)["model_stats"][0]["inference_stats"]["success"]["count"]
                    for m in ("pipeline", "scale", "pair", "topk")}
def killed(pid):
    """Kill the idle instance `pid` and wait until it is gone (or a zombie its supervisor has not
    reaped). A zombie whose other threads are still exiting is not gone yet: its parent cannot reap
    it and its pipes are still open, so a request sent then reaches it as it dies."""
    os.kill(pid, signal.SIGKILL)
    for _ in range(1000):
        try:
            with open(f"/proc/{pid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            if status["State"].split()[0] == "Z" and int(status["Threads"]) <= 1:
                return
        except FileNotFoundError:
            return
        time.sleep(0.01)


killed(faulty(4)[0])
out["idle_death"] = faulty(0)  # answered by the instance started again, no request failed
out["ready"] = [http.is_model_ready(m) for m in ("add_sub", "bls", "repeat", "faulty", "pipeline", "ident_image")]
stats = http.get_inference_statistics("add_sub")["model_stats"][0]
out["add_sub_success"] = stats["inference_stats"]["success"]["count"]
# a Python model taking a JPEG: its execute sees the tensor the DPU or the CPU path made
jpeg = np.array([[open(JPEG, "rb").read()]], dtype=object)
np.save(IMAGE_OUT, http.infer("ident_image", tensors(httpclient, {"image": jpeg})).as_numpy("output"))
x = {"X": np.array([0], np.int32)}
out["versions"] = [http.infer("versioned", tensors(httpclient, x), model_version=v).as_numpy("VERSION").tolist()
                   for v in ("1", "2", "")]
out["index"] = {entry["name"]: entry for entry in http.get_model_repository_index()}
print(json.dumps(out))
