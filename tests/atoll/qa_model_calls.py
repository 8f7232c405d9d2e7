"""tritonclient calls on Triton's QA models `simple`, `simple_string`, `simple_identity` and
`simple_int8` (run in the client environment by test_any_models.py), the calls Triton's example
clients make, written here:
    python qa_model_calls.py HTTP_ADDRESS GRPC_ADDRESS OUT.json
Each call's outcome goes to OUT.json under its name: {"ok": value} or {"status", "message"}."""

import base64
import json
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.model_config_pb2  # noqa: F401 - the service protos below need it loaded
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

HTTP, GRPC, OUT = sys.argv[1:4]
http = httpclient.InferenceServerClient(HTTP)
grpc = grpcclient.InferenceServerClient(GRPC)
results = {}


def call(name, fn):
    try:
        results[name] = {"ok": fn()}
    except InferenceServerException as exc:
        results[name] = {"status": str(exc.status()), "message": exc.message()}


def outputs(result, names):
    return {n: [x.decode() if isinstance(x, bytes) else x for x in result.as_numpy(n).reshape(-1).tolist()]
            for n in names}  # fmt: skip


def numbers_as_strings(module, binary=True):
    """simple_string's inputs: 0..15 and 1s, as text."""
    tensors = []
    for name, values in (("INPUT0", np.arange(16)), ("INPUT1", np.ones(16, int))):
        tensor = module.InferInput(name, [1, 16], "BYTES")
        array = np.array([str(v).encode() for v in values], object).reshape(1, 16)
        if module is httpclient:
            tensor.set_data_from_numpy(array, binary_data=binary)
        else:
            tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


# -- BYTES outputs: simple_string over HTTP (JSON and binary) and gRPC, simple_identity -------------
for binary in (False, True):
    call(f"http string binary={binary}", lambda: outputs(http.infer(
        "simple_string", numbers_as_strings(httpclient, binary),
        outputs=[httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]),
        ("OUTPUT0", "OUTPUT1")))  # fmt: skip
call("grpc string", lambda: outputs(grpc.infer("simple_string", numbers_as_strings(grpcclient)), ("OUTPUT0", "OUTPUT1")))
identity = httpclient.InferInput("INPUT0", [1, 3], "BYTES")
identity.set_data_from_numpy(np.array([[b"a", b"", "\u00e9t\u00e9".encode()]], object))
call("http identity", lambda: outputs(http.infer("simple_identity", [identity]), ("OUTPUT0",)))

# -- explicit typed contents over gRPC (INT32, INT8, BYTES), and both forms in one input ------------
stub = grpc._client_stub


def typed_request(model, datatype, field, values0, values1):
    request = service_pb2.ModelInferRequest(model_name=model)
    for name, values in (("INPUT0", values0), ("INPUT1", values1)):
        tensor = request.inputs.add(name=name, datatype=datatype, shape=[1, 16])
        getattr(tensor.contents, field)[:] = values
    return request


def raw_outputs(response, dtype):
    return {o.name: np.frombuffer(raw, dtype).tolist() for o, raw in zip(response.outputs, response.raw_output_contents)}


def grpc_call(name, fn):
    try:
        results[name] = {"ok": fn()}
    except Exception as exc:  # grpc.RpcError: its code and details
        results[name] = {"status": str(exc.code()), "message": exc.details()}


def serialize_split(raw):
    """BYTES elements of a raw output: each a 4-byte little-endian length, then its bytes."""
    out, at = [], 0
    while at < len(raw):
        n = int.from_bytes(raw[at : at + 4], "little")
        out.append(raw[at + 4 : at + 4 + n])
        at += 4 + n
    return out


ints = typed_request("simple", "INT32", "int_contents", list(range(16)), [1] * 16)
grpc_call("grpc int contents", lambda: raw_outputs(stub.ModelInfer(ints), np.int32))
int8s = typed_request("simple_int8", "INT8", "int_contents", list(range(16)), [1] * 16)
grpc_call("grpc int8 contents", lambda: raw_outputs(stub.ModelInfer(int8s), np.int8))
strings = typed_request("simple_string", "BYTES", "bytes_contents", [str(i).encode() for i in range(16)], [b"1"] * 16)


def string_outputs(response):
    return {o.name: [s.decode() for s in serialize_split(raw)] for o, raw in zip(response.outputs, response.raw_output_contents)}


grpc_call("grpc byte contents", lambda: string_outputs(stub.ModelInfer(strings)))
ints.raw_input_contents.append(np.arange(8, dtype=np.int32).tobytes())  # beside INPUT0's typed contents
grpc_call("grpc raw and typed contents", lambda: stub.ModelInfer(ints).model_name)


# -- shared memory: CUDA's registry on a server without GPU vGPUs, then strings in system regions ---
for client, p in ((http, "http"), (grpc, "grpc")):
    call(f"{p} cuda status", lambda c=client: list(c.get_cuda_shared_memory_status() if c is http else
                                                   c.get_cuda_shared_memory_status(as_json=True).get("regions", {})))
    call(f"{p} cuda unregister all", lambda c=client: c.unregister_cuda_shared_memory())
    call(f"{p} cuda unregister one", lambda c=client: c.unregister_cuda_shared_memory("absent"))
    call(f"{p} cuda register", lambda c=client: c.register_cuda_shared_memory("cu", base64.b64encode(bytes(64)), 0, 64))
    call(f"{p} system unregister all", lambda c=client: c.unregister_system_shared_memory())
inputs = numbers_as_strings(httpclient)
data = [serialize_byte_tensor(np.array([str(v).encode() for v in values], object)).item()
        for values in (np.arange(16), np.ones(16, int))]  # fmt: skip
expected = [serialize_byte_tensor(np.array([str(v).encode() for v in values], object)).item()
            for values in (np.arange(16) + 1, np.arange(16) - 1)]  # fmt: skip
handles = []
try:
    for i, blob in enumerate(data + expected):
        handles.append(shm.create_shared_memory_region(f"qa{i}", f"/qa_strings_{i}", len(blob)))
        if i < 2:
            shm.set_shared_memory_region(handles[-1], [np.frombuffer(blob, np.uint8)])
        http.register_system_shared_memory(f"qa{i}", f"/qa_strings_{i}", len(blob))
    for i, tensor in enumerate(inputs):
        tensor.set_shared_memory(f"qa{i}", len(data[i]))
    wanted = [httpclient.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    for i, out in enumerate(wanted):
        out.set_shared_memory(f"qa{i + 2}", len(expected[i]))
    call("http shm strings", lambda: http.infer("simple_string", inputs, outputs=wanted).get_response()["outputs"])
    results["shm strings read"] = {"ok": [[s.decode() for s in serialize_split(bytes(shm.get_contents_as_numpy(
        handles[i + 2], np.uint8, [len(expected[i])])))] for i in range(2)]}  # fmt: skip
finally:
    http.unregister_system_shared_memory()
    for handle in handles:
        shm.destroy_shared_memory_region(handle)

# -- model control: an over-long file name in a load request, then the server still serving ---------
for client, p in ((grpc, "grpc"), (http, "http")):
    call(f"{p} load long file name", lambda c=client: c.load_model("simple", config="{}", files={"file:" + "A" * 256: b"a"}))
    call(f"{p} live after", lambda c=client: c.is_server_live())
    call(f"{p} simple still ready", lambda c=client: c.is_model_ready("simple"))

with open(OUT, "w") as f:
    json.dump(results, f)
