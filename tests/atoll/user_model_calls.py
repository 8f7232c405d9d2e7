"""tritonclient calls on user models (run in the client environment by test_user_models.py):
    python user_model_calls.py HTTP_ADDRESS GRPC_ADDRESS IN.npz OUT.npz
IN.npz holds `<model>/<input>` arrays; for every model, every input is sent over HTTP (JSON and
binary data), gRPC and system shared memory (inputs and outputs in regions), and each answer's
outputs are written to OUT.npz as `<model>/<path>/<output>`. Then 32 concurrent one-row HTTP requests
to each batching model, all sent before any answer is read (`<model>` in the BATCH environment
variable, comma-separated; those also in PADDED send lengths 1 to n of their last axis in turn).
Models in BF16 (comma-separated) have their FP32 arrays sent as BF16, not in JSON, which
tritonclient refuses for BF16; their BF16 outputs are written to OUT.npz as FP32 (exact)."""

import os
import sys

import ml_dtypes
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import np_to_triton_dtype, serialize_byte_tensor

HTTP, GRPC, IN, OUT = sys.argv[1:5]
BF16 = os.environ.get("BF16", "").split(",")
feeds = {}
for key, array in np.load(IN).items():
    model, name = key.split("/")
    feeds.setdefault(model, {})[name] = array.astype(ml_dtypes.bfloat16) if model in BF16 else array
http = httpclient.InferenceServerClient(HTTP, concurrency=32)
grpc = grpcclient.InferenceServerClient(GRPC)
results = {}


def inputs(module, arrays, binary=True):
    out = []
    for name, array in arrays.items():
        array = array.astype(object) if array.dtype.kind == "S" else array  # BYTES, as clients send them
        tensor = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        if module is httpclient:
            tensor.set_data_from_numpy(array, binary_data=binary)
        else:
            tensor.set_data_from_numpy(array)
        out.append(tensor)
    return out


def keep(model, path, result, names):
    for name in names:
        array = result.as_numpy(name)
        results[f"{model}/{path}/{name}"] = array.astype(np.float32) if array.dtype == ml_dtypes.bfloat16 else array


def via_shared_memory(model, arrays, names):
    """Inputs and outputs in system shared memory regions (outputs sized from the HTTP answer)."""
    answers = {name: results[f"{model}/http-binary/{name}"] for name in names}
    if model in BF16:
        answers = {name: array.astype(ml_dtypes.bfloat16) for name, array in answers.items()}
    sizes = {name: len(serialize_byte_tensor(a).item()) if a.dtype == object else a.nbytes
             for name, a in answers.items()}  # fmt: skip
    handles, tensors, wanted = [], [], []
    try:
        for name, array in arrays.items():
            if array.dtype.kind == "S":  # BYTES in a region: serialized as the protocol lays them out
                array = np.frombuffer(serialize_byte_tensor(array.astype(object)).item(), np.uint8)
                datatype, shape = "BYTES", list(feeds[model][name].shape)
            else:
                datatype, shape = np_to_triton_dtype(array.dtype), list(array.shape)
            key = f"/um_{model}_{name}"
            handles.append(shm.create_shared_memory_region(f"{model}_{name}", key, array.nbytes))
            shm.set_shared_memory_region(handles[-1], [np.ascontiguousarray(array)])
            http.register_system_shared_memory(f"{model}_{name}", key, array.nbytes)
            tensor = httpclient.InferInput(name, shape, datatype)
            tensor.set_shared_memory(f"{model}_{name}", array.nbytes)
            tensors.append(tensor)
        for name in names:
            key = f"/um_{model}_out_{name}"
            handles.append(shm.create_shared_memory_region(f"{model}_out_{name}", key, sizes[name]))
            http.register_system_shared_memory(f"{model}_out_{name}", key, sizes[name])
            out = httpclient.InferRequestedOutput(name, binary_data=True)
            out.set_shared_memory(f"{model}_out_{name}", sizes[name])
            wanted.append(out)
        http.infer(model, tensors, outputs=wanted)
        for handle, name in zip(handles[len(arrays):], names):
            like = answers[name]
            array = shm.get_contents_as_numpy(handle, like.dtype, list(like.shape)).copy()
            results[f"{model}/shm/{name}"] = array.astype(np.float32) if model in BF16 else array
    finally:
        http.unregister_system_shared_memory()
        for handle in handles:
            shm.destroy_shared_memory_region(handle)


for model, arrays in feeds.items():
    names = [o["name"] for o in http.get_model_metadata(model)["outputs"]]
    as_json = [httpclient.InferRequestedOutput(n, binary_data=False) for n in names]
    if model not in BF16:
        keep(model, "http-json", http.infer(model, inputs(httpclient, arrays, binary=False), outputs=as_json), names)
    keep(model, "http-binary", http.infer(model, inputs(httpclient, arrays)), names)
    keep(model, "grpc", grpc.infer(model, inputs(grpcclient, arrays)), names)
    via_shared_memory(model, arrays, names)

for model in filter(None, os.environ.get("BATCH", "").split(",")):
    arrays = {name: array[:1] for name, array in feeds[model].items()}  # one row each: batches are of requests
    if model in os.environ.get("PADDED", "").split(","):  # request i: the first 1 + i % n of the last axis
        length = next(iter(arrays.values())).shape[-1]
        requests = [{k: v[..., : 1 + i % length] for k, v in arrays.items()} for i in range(32)]
    else:
        requests = [arrays] * 32
    pending = [http.async_infer(model, inputs(httpclient, r)) for r in requests]
    answers = [request.get_result() for request in pending]
    for i, answer in enumerate(answers):
        names = [o["name"] for o in answer.get_response()["outputs"]]
        keep(model, f"concurrent{i}", answer, names)
np.savez(OUT, **results)
