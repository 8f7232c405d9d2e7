"""tritonclient calls on examples/python_pipeline (run in the client environment by
test_example_pipeline.py): python example_calls.py HTTP_ADDRESS GRPC_ADDRESS JPEG OUT.npz. The JPEG
goes to the ensemble `classify` (HTTP, with class_count on PROBABILITIES, and gRPC) and to
`mobilenet_v3_small` alone; every answer's tensors are written to OUT.npz."""

import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

HTTP, GRPC, JPEG, OUT = sys.argv[1:5]
jpeg = np.array([[open(JPEG, "rb").read()]], dtype=object)
out = {}
for path, module, client in (("http", httpclient, httpclient.InferenceServerClient(HTTP)),
                             ("grpc", grpcclient, grpcclient.InferenceServerClient(GRPC))):
    image = module.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(jpeg)
    wanted = [module.InferRequestedOutput(n) for n in ("TOPK_INDICES", "TOPK_SCORES")]
    wanted.append(module.InferRequestedOutput("PROBABILITIES", class_count=5))
    result = client.infer("classify", [image], outputs=wanted)
    for name in ("TOPK_INDICES", "TOPK_SCORES", "PROBABILITIES"):
        out[f"{path}/{name}"] = result.as_numpy(name)
    if path == "http":
        image = module.InferInput("image", [1, 1], "BYTES")
        image.set_data_from_numpy(jpeg)
        out["logits"] = client.infer("mobilenet_v3_small", [image]).as_numpy("logits")
np.savez(OUT, **out)
