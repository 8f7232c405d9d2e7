"""tritonclient calls on the stateful models of test_sequences.py (run in the client environment):
    python sequence_calls.py HTTP_ADDRESS GRPC_ADDRESS OUT.json
The same calls Triton's sequence example clients make (sequence_id / sequence_start / sequence_end
on infer, async_stream_infer and the asyncio stream), on each model over HTTP, gRPC, the gRPC
stream and the asyncio clients; what the server answered goes to OUT.json, keyed by
`<model>/<how>`, for the test to hold against Triton's documentation."""

import asyncio
import json
import queue
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from tritonclient.utils import InferenceServerException

HTTP, GRPC, OUT = sys.argv[1:4]
MODULES = {"http": httpclient, "grpc": grpcclient}
out = {}


def inputs(module, value, binary=True, datatype="INT32"):
    tensor = module.InferInput("INPUT", [1, 1], datatype)
    array = np.full((1, 1), value, np.int32 if datatype == "INT32" else np.float32)
    tensor.set_data_from_numpy(array, **({} if binary else {"binary_data": False}))
    return [tensor]


def error(exc: InferenceServerException) -> dict:
    return {"error": exc.message(), "status": exc.status()}


def sync(transport, model, sequences):
    """Each sequence's values sent in turn, one request after another (the sync example clients)."""
    module = MODULES[transport]
    client = module.InferenceServerClient(HTTP if transport == "http" else GRPC)
    answers = {}
    for corrid, values in sequences.items():
        answers[str(corrid)] = [
            client.infer(model, inputs(module, v), sequence_id=corrid, sequence_start=k == 0,
                         sequence_end=k == len(values) - 1).as_numpy("OUTPUT").tolist()
            for k, v in enumerate(values)]  # fmt: skip
    return answers


def stream(model, sequences):
    """Every request of every sequence sent on one gRPC stream at once (the stream example client);
    answers by sequence, in the order they came."""
    got = queue.Queue()
    answers = {str(c): [] for c in sequences}
    with grpcclient.InferenceServerClient(GRPC) as client:
        client.start_stream(callback=lambda result, error: got.put(error or result))
        for corrid, values in sequences.items():
            for k, v in enumerate(values):
                client.async_stream_infer(model, inputs(grpcclient, v), request_id=f"{corrid}_{k}", sequence_id=corrid,
                                          sequence_start=k == 0, sequence_end=k == len(values) - 1)  # fmt: skip
        for _ in range(sum(map(len, sequences.values()))):
            item = got.get(timeout=60)
            if isinstance(item, InferenceServerException):
                return error(item)
            answers[item.get_response().id.rsplit("_", 1)[0]].append(item.as_numpy("OUTPUT").tolist())
    return answers


async def aio_stream(model, sequences):
    """The asyncio gRPC client's stream_infer over a request iterator (the aio stream example client)."""

    async def requests():
        for corrid, values in sequences.items():
            for k, v in enumerate(values):
                yield {"model_name": model, "inputs": inputs(grpcclient, v), "request_id": f"{corrid}_{k}",
                       "sequence_id": corrid, "sequence_start": k == 0, "sequence_end": k == len(values) - 1}

    answers = {str(c): [] for c in sequences}
    async with grpcaio.InferenceServerClient(GRPC) as client:
        async for result, exc in client.stream_infer(requests()):
            if exc is not None:
                return error(exc)
            answers[result.get_response().id.rsplit("_", 1)[0]].append(result.as_numpy("OUTPUT").tolist())
    return answers


async def aio_concurrent(transport, model, sequences, datatype="INT32"):
    """Every sequence at once, each awaiting its own requests in order (asyncio clients): their
    requests meet in the batcher."""
    module = httpaio if transport == "http" else grpcaio
    client = module.InferenceServerClient(HTTP if transport == "http" else GRPC)

    async def one(corrid, values):
        return [(await client.infer(model, inputs(MODULES[transport], v, datatype=datatype), sequence_id=corrid,
                                    sequence_start=k == 0,
                                    sequence_end=k == len(values) - 1)).as_numpy("OUTPUT").tolist()
                for k, v in enumerate(values)]  # fmt: skip

    try:
        results = await asyncio.gather(*(one(c, v) for c, v in sequences.items()))
    finally:
        await client.close()
    return {str(c): r for c, r in zip(sequences, results)}


def refused(transport, model, **kw):
    module = MODULES[transport]
    client = module.InferenceServerClient(HTTP if transport == "http" else GRPC)
    try:
        return client.infer(model, inputs(module, 1), **kw).as_numpy("OUTPUT").tolist()
    except InferenceServerException as exc:
        return error(exc)


VALUES = [11, 7, 5, 3, 2, 0, 1]  # the example clients' values
SEQUENCES = {1000: [0] + VALUES, 1001: [100] + [-v for v in VALUES], "a-string-id": [20] + [-v for v in VALUES]}
DYNA = {1000: [0] + VALUES, 1001: [100] + [-v for v in VALUES]}
MANY = {corrid: list(range(corrid, corrid + 5)) for corrid in range(1, 13)}  # 12 sequences: more than 8 slots

for model in ("simple_sequence", "simple_sequence_direct", "accumulator", "accumulator_direct"):
    for transport in ("http", "grpc"):
        out[f"{model}/{transport}"] = sync(transport, model, SEQUENCES)
        out[f"{model}/{transport}/aio"] = asyncio.run(aio_concurrent(transport, model, MANY))
    out[f"{model}/stream"] = stream(model, SEQUENCES)
    out[f"{model}/aio_stream"] = asyncio.run(aio_stream(model, SEQUENCES))
for transport in ("http", "grpc"):  # an FP32 model: run by Atoll's own kernel runtime, batches padded to built sizes
    out[f"fp32_accumulator/{transport}/aio"] = asyncio.run(aio_concurrent(transport, "fp32_accumulator", MANY, "FP32"))
for model in ("simple_dyna_sequence", "simple_dyna_sequence_oldest"):
    for transport in ("http", "grpc"):
        out[f"{model}/{transport}"] = sync(transport, model, DYNA)
    out[f"{model}/stream"] = stream(model, DYNA)
for transport in ("http", "grpc"):
    out[f"simple_string_dyna_sequence/{transport}"] = sync(transport, "simple_string_dyna_sequence",
                                                           {"1002": [20] + [-v for v in VALUES]})
    out[f"no_id/{transport}"] = refused(transport, "accumulator")
    out[f"not_started/{transport}"] = refused(transport, "accumulator", sequence_id=77)
    out[f"string_for_uint64/{transport}"] = refused(transport, "simple_dyna_sequence", sequence_id="9",
                                                    sequence_start=True)
    # idle past max_sequence_idle_microseconds (200 ms): the sequence is released
    out[f"idle/{transport}/start"] = refused(transport, "idle", sequence_id=5, sequence_start=True)
    time.sleep(1.0)
    out[f"idle/{transport}/after"] = refused(transport, "idle", sequence_id=5)
json_client = httpclient.InferenceServerClient(HTTP)  # JSON tensors both ways, not binary
out["accumulator/http_json"] = [
    json_client.infer("accumulator", inputs(httpclient, v, binary=False), sequence_id="json", sequence_start=k == 0,
                      outputs=[httpclient.InferRequestedOutput("OUTPUT", binary_data=False)]).as_numpy("OUTPUT").tolist()
    for k, v in enumerate([4, 5, 6])]  # fmt: skip
for transport, module in MODULES.items():  # a state output the config lists, asked for (implicit_state_management.md)
    client = module.InferenceServerClient(HTTP if transport == "http" else GRPC)
    wanted = [module.InferRequestedOutput("OUTPUT"), module.InferRequestedOutput("OUTPUT_STATE")]
    results = [client.infer("accumulator_state", inputs(module, v), sequence_id=3, sequence_start=k == 0,
                            sequence_end=k == 2, outputs=wanted) for k, v in enumerate([1, 2, 3])]  # fmt: skip
    out[f"accumulator_state/{transport}"] = [[r.as_numpy(n).tolist() for n in ("OUTPUT", "OUTPUT_STATE")]
                                             for r in results]  # fmt: skip
with grpcclient.InferenceServerClient(GRPC) as stream_client:  # a refusal on the stream is that request's error
    refusals = queue.Queue()
    stream_client.start_stream(callback=lambda result, error: refusals.put(error or result))
    stream_client.async_stream_infer("accumulator", inputs(grpcclient, 1), sequence_id=88)
    item = refusals.get(timeout=60)
    out["not_started/stream"] = error(item) if isinstance(item, InferenceServerException) else "answered"
with open(OUT, "w") as f:
    json.dump(out, f)
