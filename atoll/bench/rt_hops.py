"""The server's hops outside the dispatcher, per request, for the real-time bound (`atoll rt
profile`): a real-time request's bound covers its time from the dispatcher's arrival to the
worker's answer; before that the front end receives the request, decodes it, writes its slot and
hands it to the dispatcher, and after it the front end reads the Done message and answers.

Measured from a client on this machine: `atoll serve` on a repository of one model a few
microseconds long (a 4-wide MatMul + Relu, real-time by its priority), `requests` requests one at
a time over HTTP (JSON, one kept-alive connection); the largest round trip, times the margin,
is the hops' WCET. Safe side: it also holds the model's run, the dispatcher-to-worker hop (both in
the vGPU stage's bound already), loopback and this client's own encoding. Not in it: the network
between a remote client and the server, and a media model's preprocessing (a stage of its own)."""

from __future__ import annotations

import http.client
import json
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from atoll.bench.switch_models import output_name, repository
from atoll.supervisor.server_process import ServerProcess

MODEL, WIDTH = "rt-hop", 4


def round_trips(vgpu_mode: str, requests: int, seed: int = 0) -> list[float]:
    """Client-side seconds of `requests` real-time requests of a near-empty model, one at a time."""
    rng = np.random.default_rng(seed)
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, WIDTH], "datatype": "FP32", "data": [1.0] * WIDTH}],
                       "outputs": [{"name": output_name(1)}], "parameters": {"priority": 1}}).encode()  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="atoll-rt-hops-") as tmp:
        repository(Path(tmp), [MODEL], layers=1, width=WIDTH, max_batch=1)
        args = ["--repository", tmp, "--grpc-port", "-1", "--front-ends", "1", "--set", f"vgpus.mode={vgpu_mode}"]
        with ServerProcess(args) as server:
            where = urlsplit(server.url)
            connection = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
            try:
                times = []
                for k in range(requests + 5):  # the first five warm the path up
                    time.sleep(rng.uniform(0.002, 0.01))  # a row at a time, as a lone real-time client
                    start = time.perf_counter()
                    connection.request("POST", f"/v2/models/{MODEL}/infer", body,
                                       {"Content-Type": "application/json"})  # fmt: skip
                    response = connection.getresponse()
                    answer = response.read()
                    elapsed = time.perf_counter() - start
                    if response.status != 200:
                        raise RuntimeError(f"the hop probe's request failed: {response.status} {answer[:200]!r}")
                    if k >= 5:
                        times.append(elapsed)
                return times
            finally:
                connection.close()
