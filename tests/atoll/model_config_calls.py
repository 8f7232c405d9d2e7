"""tritonclient calls on the models of test_model_config.py (run in the client environment):
    python model_config_calls.py HTTP_ADDRESS GRPC_ADDRESS REPOSITORY OUT.json
Each call is made over HTTP and gRPC; what the server answered is written to OUT.json, keyed by
`<transport>/<what>`, for the test to hold against Triton's documentation."""

import json
import sys
import threading

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format
from tritonclient.utils import InferenceServerException

HTTP, GRPC, REPOSITORY, OUT = sys.argv[1:5]
TIMEOUT_S = 30  # far below the server's [batching] delay (10 minutes): a request held that long fails
http = httpclient.InferenceServerClient(HTTP, concurrency=8, network_timeout=TIMEOUT_S)
grpc = grpcclient.InferenceServerClient(GRPC)
CLIENTS = {"http": (httpclient, http), "grpc": (grpcclient, grpc)}
out = {}
X = np.arange(8, dtype=np.float32).reshape(2, 4)


def request(module, array, name="x"):
    tensor = module.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    return [tensor]


def infer(transport, model, array=X, version="", **kw):
    """The output `y` as a list, or the error's message."""
    module, client = CLIENTS[transport]
    extra = {"client_timeout": TIMEOUT_S} if transport == "grpc" else {}
    try:
        return client.infer(model, request(module, array), model_version=version, **kw, **extra).as_numpy("y").tolist()
    except InferenceServerException as exc:
        return {"error": exc.message(), "status": exc.status()}


def start(transport, model, **kw):
    """Send a request now; returns what waits for its answer (`y` or the error, as `infer`)."""
    module, client = CLIENTS[transport]
    if transport == "http":  # gevent's client: async_infer, not threads
        pending = client.async_infer(model, request(module, X[:1]), **kw)
        return lambda: _answer(pending.get_result)
    done, box = threading.Event(), []

    def callback(result, error):
        box.append(error if error is not None else result)
        done.set()

    client.async_infer(model, request(module, X[:1]), callback, client_timeout=TIMEOUT_S, **kw)

    def wait():
        done.wait(TIMEOUT_S)
        return _answer(lambda: box[0] if not isinstance(box[0], Exception) else _raise(box[0]))

    return wait


def _raise(exc):
    raise exc


def _answer(get):
    try:
        return get().as_numpy("y").tolist()
    except InferenceServerException as exc:
        return {"error": exc.message(), "status": exc.status()}


def at_once(requests):
    """Every request (transport, model, keywords) sent before any is answered; their answers in order."""
    waits = [start(t, model, **kw) for t, model, kw in requests]
    return [wait() for wait in waits]


def as_dict(message):
    return message if isinstance(message, dict) else json_format.MessageToDict(message, preserving_proto_field_name=True)


for transport, (module, client) in CLIENTS.items():
    t = transport
    # version_policy: latest 2 of versions 1-3 (y = x + version), specific [1, 3]
    out[f"{t}/index"] = [(m["name"], m.get("version"), m.get("state")) for m in
                         (as_dict(client.get_model_repository_index()).get("models", [])
                          if t == "grpc" else client.get_model_repository_index())]  # fmt: skip
    for model in ("versioned", "pinned"):
        for version in ("", "1", "2", "3"):
            out[f"{t}/{model}/{version or 'none'}"] = infer(t, model, version=version)
            out[f"{t}/{model}/{version or 'none'}/ready"] = client.is_model_ready(model, version)
    meta = as_dict(client.get_model_metadata("versioned"))
    out[f"{t}/versioned/metadata"] = meta["versions"]
    out[f"{t}/versioned/2/metadata"] = as_dict(client.get_model_metadata("versioned", "2"))["name"]
    config = as_dict(client.get_model_config("versioned", "3"))
    out[f"{t}/versioned/config"] = (config.get("config", config))["version_policy"]
    stats = as_dict(client.get_inference_statistics("versioned"))["model_stats"]
    out[f"{t}/versioned/stats"] = sorted((s["version"], int(s["inference_stats"]["success"].get("count", 0)))
                                         for s in stats)  # fmt: skip
    out[f"{t}/versioned/2/stats"] = [s["version"] for s in as_dict(
        client.get_inference_statistics("versioned", "2"))["model_stats"]]  # fmt: skip
    # batching as the config says: the server's own delay is 10 minutes
    for model in ("direct", "zero"):
        out[f"{t}/{model}"] = infer(t, model)
    config = as_dict(client.get_model_config("direct"))
    out[f"{t}/direct/config"] = "dynamic_batching" in config.get("config", config)
    # reshape: the request's [n, 4] is the graph's [n, 2, 2]
    out[f"{t}/square"] = infer(t, "square")
    config = as_dict(client.get_model_config("square"))
    out[f"{t}/square/config"] = [i.get("reshape") for i in config.get("config", config)["input"]]

# queue policies: one-row requests, both transports at once (each batch waits out its model's delay)
out["bounded"] = at_once([(t, "bounded", {}) for t in ("http", "grpc") for _ in range(3)])
out["timed"] = at_once([(t, "timed", kw) for t in ("http", "grpc") for kw in ({"timeout": 100_000}, {})])
out["delayed"] = at_once([(t, "delayed", {"timeout": 100_000}) for t in ("http", "grpc")])

# a version the policy no longer names is unloaded; the other goes on serving
with open(f"{REPOSITORY}/versioned/config.pbtxt") as f:
    text = f.read()
with open(f"{REPOSITORY}/versioned/config.pbtxt", "w") as f:
    f.write(text.replace("latest: { num_versions: 2 }", "specific: { versions: [ 3 ] }"))
http.load_model("versioned")
out["after/index"] = [(m["name"], m.get("version"), m.get("state"), m.get("reason"))
                      for m in http.get_model_repository_index() if m["name"] == "versioned"]  # fmt: skip
for transport in CLIENTS:
    out[f"after/{transport}/3"] = infer(transport, "versioned", version="3")
    out[f"after/{transport}/2"] = infer(transport, "versioned", version="2")
    out[f"after/{transport}/2/ready"] = CLIENTS[transport][1].is_model_ready("versioned", "2")

with open(OUT, "w") as f:
    json.dump(out, f)
