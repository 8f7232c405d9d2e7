"""The same `tritonclient` calls against any KServe v2 / Triton server, HTTP and gRPC, sync and
asyncio: every endpoint, good and bad. Prints one JSON object: for each call its status ("OK", the
HTTP status, or the gRPC status code), the structure of its answer (keys and value types) and the
values a test checks. `test_triton_protocol.py` runs it against `atoll serve`, and
`triton_conformance.py` against both Atoll and the real Triton server, to compare them.

Run in the client environment (tritonclient[http,grpc], numpy):
    python triton_calls.py HTTP_ADDRESS GRPC_ADDRESS MEDIA_DIR
MEDIA_DIR holds image.jpg and audio.wav. The server must run in explicit model-control mode with
mobilenet_v3_small loaded (its logits output labelled) and citrinet in its repository, unloaded.
"""

import asyncio
import json
import os
import queue
import sys
import urllib.error
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
import tritonclient.utils.shared_memory as shm
from google.protobuf.json_format import MessageToDict
from tritonclient.utils import InferenceServerException

IMAGE, AUDIO = "mobilenet_v3_small", "citrinet"
HTTP, GRPC, MEDIA = sys.argv[1:4]
JPEG = open(os.path.join(MEDIA, "image.jpg"), "rb").read()
WAV = open(os.path.join(MEDIA, "audio.wav"), "rb").read()
TENSOR = np.random.default_rng(0).normal(size=(1, 3, 224, 224)).astype(np.float32)
records = {}
image_successes = 0  # answers of IMAGE inferences that came back OK, counted by the client


def plain(value):
    """A response as JSON-like data: protobuf messages through their JSON mapping."""
    if hasattr(value, "get_response"):
        value = value.get_response()
    if hasattr(value, "DESCRIPTOR"):
        return MessageToDict(value, preserving_proto_field_name=True)
    return value


def structure(value):
    if isinstance(value, dict):
        return {k: structure(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [structure(value[0])] if value else []
    return type(value).__name__


def record(name, result=None, keep=None, error=None):
    if error is not None:
        records[name] = {"status": str(error.status()), "error": error.message()}
    else:
        records[name] = {"status": "OK", "structure": structure(plain(result)),
                         "value": keep(result) if keep else None}


def call(name, fn, keep=None, image_infer=False):
    global image_successes
    try:
        result = fn()
    except InferenceServerException as exc:
        record(name, error=exc)
        return None
    image_successes += image_infer
    record(name, result, keep)
    return result


def inputs(module, *which):
    out = []
    for kind in which:
        data = np.array([[JPEG]], dtype=object) if kind == "image" else TENSOR
        tensor = module.InferInput(kind, list(data.shape), "BYTES" if kind == "image" else "FP32")
        tensor.set_data_from_numpy(data)
        out.append(tensor)
    return out


def logits(result):
    return result.as_numpy("logits").reshape(-1).tolist()


def strings(result):
    return [s.decode() for s in result.as_numpy("logits").reshape(-1)]


def raw_http(method, path, body=None):
    request = urllib.request.Request(f"http://{HTTP}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            status, payload = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, payload = e.code, e.read()
    try:
        return {"status": str(status), "body": json.loads(payload) if payload else None}
    except json.JSONDecodeError:
        return {"status": str(status), "body": payload.decode(errors="replace")}


def stats(client):
    return plain(client.get_inference_statistics(IMAGE))["model_stats"][0]


def per_protocol(p, module, client):
    call(f"{p} server live", client.is_server_live, lambda r: r)
    call(f"{p} server ready", client.is_server_ready, lambda r: r)
    call(f"{p} server metadata", client.get_server_metadata, lambda r: sorted(plain(r)["extensions"]))
    call(f"{p} model metadata", lambda: client.get_model_metadata(IMAGE), lambda r: plain(r)["inputs"])
    call(f"{p} model config", lambda: client.get_model_config(IMAGE),
         lambda r: [t["name"] for t in plain(r).get("config", plain(r))["input"]])
    call(f"{p} model ready", lambda: client.is_model_ready(IMAGE), lambda r: r)
    call(f"{p} unloaded model ready", lambda: client.is_model_ready(AUDIO), lambda r: r)
    call(f"{p} unknown model metadata", lambda: client.get_model_metadata("nope"))
    call(f"{p} unknown model version", lambda: client.get_model_metadata(IMAGE, "7"))
    call(f"{p} infer jpeg", lambda: client.infer(IMAGE, inputs(module, "image")), logits, True)
    call(f"{p} infer tensor", lambda: client.infer(IMAGE, inputs(module, "input")), logits, True)
    classified = [module.InferRequestedOutput("logits", class_count=3)]
    call(f"{p} classification", lambda: client.infer(IMAGE, inputs(module, "image"), outputs=classified),
         strings, True)
    call(f"{p} infer jpeg and tensor", lambda: client.infer(IMAGE, inputs(module, "image", "input")), None, True)
    call(f"{p} infer unknown model", lambda: client.infer("nope", inputs(module, "input")))
    call(f"{p} infer unknown output", lambda: client.infer(IMAGE, inputs(module, "input"),
                                                           outputs=[module.InferRequestedOutput("nope")]))
    bad = module.InferInput("input", [1, 2, 224, 224], "FP32")
    bad.set_data_from_numpy(TENSOR[:, :2].copy())
    call(f"{p} infer bad shape", lambda: client.infer(IMAGE, [bad]))
    call(f"{p} statistics", lambda: client.get_inference_statistics(IMAGE))
    call(f"{p} statistics of every model", lambda: client.get_inference_statistics(),
         lambda r: [m["name"] for m in plain(r)["model_stats"]])
    call(f"{p} statistics of unloaded model", lambda: client.get_inference_statistics(AUDIO))
    call(f"{p} repository index", client.get_model_repository_index, lambda r: plain(r))
    call(f"{p} cuda shared memory register", lambda: client.register_cuda_shared_memory("cu", b"AAAA", 0, 64))
    call(f"{p} cuda shared memory status", client.get_cuda_shared_memory_status)
    call(f"{p} trace settings", client.get_trace_settings)
    call(f"{p} log settings", client.get_log_settings)


def shared_memory(p, module, client):
    """An input and an output in system shared memory, registered over this protocol."""
    key = f"/atoll_calls_{os.getpid()}_{p}"
    out_bytes = 1000 * 4
    handles = [shm.create_shared_memory_region(f"{p}_in", key + "_in", TENSOR.nbytes),
               shm.create_shared_memory_region(f"{p}_out", key + "_out", 2 * out_bytes)]
    try:
        shm.set_shared_memory_region(handles[0], [TENSOR])
        call(f"{p} shm register", lambda: client.register_system_shared_memory(f"{p}_in", key + "_in", TENSOR.nbytes))
        call(f"{p} shm register output", lambda: client.register_system_shared_memory(f"{p}_out", key + "_out",
                                                                                       2 * out_bytes))
        call(f"{p} shm register twice", lambda: client.register_system_shared_memory(f"{p}_in", key + "_in", 64))
        call(f"{p} shm register missing key", lambda: client.register_system_shared_memory("x", "/no_such_key", 64))
        call(f"{p} shm status", lambda: client.get_system_shared_memory_status(f"{p}_in"))
        call(f"{p} shm status unknown", lambda: client.get_system_shared_memory_status("nope"))
        tensor = module.InferInput("input", list(TENSOR.shape), "FP32")
        tensor.set_shared_memory(f"{p}_in", TENSOR.nbytes)
        wanted = module.InferRequestedOutput("logits")
        wanted.set_shared_memory(f"{p}_out", out_bytes, offset=out_bytes)
        call(f"{p} shm infer", lambda: client.infer(IMAGE, [tensor], outputs=[wanted]),
             lambda r: shm.get_contents_as_numpy(handles[1], np.float32, [2, 1000])[1].tolist(), True)
        # new HTTP connections (any front end) read the region registered over this protocol
        shared = httpclient.InferInput("input", list(TENSOR.shape), "FP32")
        shared.set_shared_memory(f"{p}_in", TENSOR.nbytes)
        for i in range(4):
            call(f"{p} shm region read over new http connection {i}",
                 lambda: httpclient.InferenceServerClient(HTTP).infer(IMAGE, [shared]), logits, True)
        small = module.InferRequestedOutput("logits")
        small.set_shared_memory(f"{p}_out", 100)
        call(f"{p} shm output too small", lambda: client.infer(IMAGE, [tensor], outputs=[small]))
        lost = module.InferInput("input", list(TENSOR.shape), "FP32")
        lost.set_shared_memory("nope", TENSOR.nbytes)
        call(f"{p} shm unknown region", lambda: client.infer(IMAGE, [lost]))
        call(f"{p} shm unregister", lambda: client.unregister_system_shared_memory(f"{p}_in"))
        call(f"{p} shm unregister all", client.unregister_system_shared_memory)
        call(f"{p} shm status after", client.get_system_shared_memory_status, lambda r: plain(r))
    finally:
        for handle in handles:
            shm.destroy_shared_memory_region(handle)


def model_control(http, grpc):
    """Load citrinet over gRPC, serve a WAV on it over HTTP, unload it over HTTP."""
    call("grpc load", lambda: grpc.load_model(AUDIO))
    call("http index after load", http.get_model_repository_index, lambda r: plain(r))
    wav = httpclient.InferInput("audio", [1, 1], "BYTES")
    wav.set_data_from_numpy(np.array([[WAV]], dtype=object))
    call("http infer loaded model", lambda: http.infer(AUDIO, [wav]), lambda r: list(r.as_numpy("log_probs").shape))
    call("http unload", lambda: http.unload_model(AUDIO))
    call("grpc index after unload", grpc.get_model_repository_index, lambda r: plain(r))
    call("http infer unloaded model", lambda: http.infer(AUDIO, [wav]))
    call("http load unknown model", lambda: http.load_model("nope"))
    call("grpc unload unknown model", lambda: grpc.unload_model("nope"))


def stream(grpc):
    """Three requests on one ModelStreamInfer stream, the second for an unknown model."""
    global image_successes
    answers = queue.Queue()
    grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
    for i, model in enumerate((IMAGE, "nope", IMAGE)):
        grpc.async_stream_infer(model, inputs(grpcclient, "input"), request_id=str(i))
    got = {}
    for _ in range(3):
        result, error = answers.get(timeout=60)
        if error is None:
            got[result.get_response().id] = logits(result)
            image_successes += 1
        else:
            got["error"] = error.message()
    grpc.stop_stream()
    records["grpc stream"] = {"status": "OK", "value": got}


async def asyncio_clients():
    h, g = httpaio.InferenceServerClient(HTTP), grpcaio.InferenceServerClient(GRPC)
    try:
        for p, module, client in (("http.aio", httpaio, h), ("grpc.aio", grpcaio, g)):
            for name, coroutine, keep in (
                (f"{p} model ready", client.is_model_ready(IMAGE), lambda r: r),
                (f"{p} infer jpeg", client.infer(IMAGE, inputs(module, "image")), logits),
                (f"{p} infer unknown model", client.infer("nope", inputs(module, "input")), None),
                (f"{p} statistics", client.get_inference_statistics(IMAGE), None),
            ):
                try:
                    result = await coroutine
                except InferenceServerException as exc:
                    record(name, error=exc)
                    continue
                record(name, result, keep)
                global image_successes
                image_successes += name.endswith("infer jpeg")
    finally:
        await h.close()
        await g.close()


def json_and_typed(http, grpc):
    """The same tensors as JSON (`binary_data=False`, in and out) and as gRPC typed contents."""
    tensor = httpclient.InferInput("input", list(TENSOR.shape), "FP32")
    tensor.set_data_from_numpy(TENSOR, binary_data=False)
    as_json = [httpclient.InferRequestedOutput("logits", binary_data=False)]
    call("http infer tensor json", lambda: http.infer(IMAGE, [tensor], outputs=as_json), logits, True)
    image = httpclient.InferInput("image", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[JPEG]], dtype=object))
    call("http infer jpeg json output", lambda: http.infer(IMAGE, [image], outputs=as_json), logits, True)
    for name, kind, values in (("tensor", "FP32", TENSOR), ("jpeg", "BYTES", np.array([[JPEG]], dtype=object))):
        request = grpcclient.service_pb2.ModelInferRequest(model_name=IMAGE)
        typed = request.inputs.add(name="input" if kind == "FP32" else "image", datatype=kind, shape=values.shape)
        contents = typed.contents.fp32_contents if kind == "FP32" else typed.contents.bytes_contents
        contents.extend(values.reshape(-1).tolist())
        call(f"grpc infer {name} typed", lambda: grpc._client_stub.ModelInfer(request),
             lambda r: np.frombuffer(r.raw_output_contents[0], np.float32).tolist(), True)


def main():
    http, grpc = httpclient.InferenceServerClient(HTTP), grpcclient.InferenceServerClient(GRPC)
    before = stats(http)["inference_stats"]["success"]["count"]
    per_protocol("http", httpclient, http)
    per_protocol("grpc", grpcclient, grpc)
    shared_memory("http", httpclient, http)
    shared_memory("grpc", grpcclient, grpc)
    json_and_typed(http, grpc)
    model_control(http, grpc)
    stream(grpc)
    asyncio.run(asyncio_clients())
    records["raw unknown endpoint"] = raw_http("GET", "/v2/nope")
    records["raw infer bad json"] = raw_http("POST", f"/v2/models/{IMAGE}/infer", b"{oops")
    after = stats(grpc)["inference_stats"]["success"]["count"]
    records["statistics growth"] = {"status": "OK", "value": {"successes": int(after) - int(before),
                                                             "answered": image_successes}}
    print(json.dumps(records))


main()
