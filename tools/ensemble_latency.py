"""An ensemble's added latency over its steps' sum: examples/python_pipeline served (MobileNetV3-small
built from the zoo into a copy of it), one client sending, in turn, a JPEG to the ensemble
`classify`, the same JPEG to `mobilenet_v3_small`, and that answer's logits to `topk`, one request
at a time over one HTTP keep-alive connection (binary tensors). Prints each one's p50 and p99 and
the ensemble's p50 minus the steps' p50s. Figures: docs/models.md.

Usage: python tools/ensemble_latency.py [--requests 300] [--warmup 30]
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from gpu_runtime.zoo import build
from gpu_runtime.zoo.repository import write_model

from atoll.bench.bodies import infer_body, tensor_body
from atoll.bench.corpus import jpeg_bytes
from atoll.kserve.protocol import HEADER_LENGTH
from atoll.supervisor.server_process import ServerProcess

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "python_pipeline"


def post(connection: http.client.HTTPConnection, model: str, body) -> tuple[float, bytes, int]:
    data, headers = body
    start = time.perf_counter()
    connection.request("POST", f"/v2/models/{model}/infer", data, headers)
    answer = connection.getresponse()
    payload = answer.read()
    elapsed = time.perf_counter() - start
    if answer.status != 200:
        raise RuntimeError(f"{model}: HTTP {answer.status} {payload[:300]!r}")
    return elapsed, payload, int(answer.getheader(HEADER_LENGTH, len(payload)))


def logits_of(payload: bytes, header_length: int) -> np.ndarray:
    head = json.loads(payload[:header_length])
    (out,) = [o for o in head["outputs"] if o["name"] == "logits"]
    return np.frombuffer(payload[header_length:], "<f4").reshape(out["shape"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        shutil.copytree(EXAMPLE, root)
        write_model(root, "mobilenet_v3_small", build("mobilenet_v3_small"))
        serve = ["--repository", str(root), "--backend", "cpu", "--set", "vgpus.cpu_vgpus=1", "--front-ends", "1"]
        with ServerProcess(serve) as server:
            connection = http.client.HTTPConnection(server.url.removeprefix("http://"))
            jpeg = jpeg_bytes(400, 300, seed=43)
            times: dict[str, list[float]] = {"classify": [], "mobilenet_v3_small": [], "topk": []}
            for i in range(args.warmup + args.requests):
                took = {"classify": post(connection, "classify", infer_body("IMAGE", [jpeg]))[0]}
                took["mobilenet_v3_small"], payload, length = post(connection, "mobilenet_v3_small",
                                                                   infer_body("image", [jpeg]))  # fmt: skip
                took["topk"] = post(connection, "topk", tensor_body("LOGITS", logits_of(payload, length)))[0]
                if i >= args.warmup:
                    for model, seconds in took.items():
                        times[model].append(seconds * 1e3)
    p50 = {m: float(np.percentile(t, 50)) for m, t in times.items()}
    for model, t in times.items():
        print(f"{model:20s} p50 {p50[model]:7.2f} ms  p99 {np.percentile(t, 99):7.2f} ms")
    added = p50["classify"] - p50["mobilenet_v3_small"] - p50["topk"]
    print(f"ensemble p50 - steps' p50s: {added:+.2f} ms ({args.requests} requests each)")


if __name__ == "__main__":
    sys.exit(main())
