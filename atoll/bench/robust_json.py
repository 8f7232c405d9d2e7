"""`atoll bench robust`'s JSON step: N concurrent large JSON infer requests (tritonclient's
`binary_data=False`, a constant 0.5 as the issue's client sends), with a shape that does not match
the model, then with the right shape for a model whose input is that large (built here with
onnx.helper: y = ReduceSum(x), nothing downloaded). Reported: each request's time to its answer
(from its first byte sent; a refusal may come while the body is still being sent), the growth of
the server processes' peak RSS against the bytes in flight plus their tensors, and health and
metadata latency polled meanwhile.

Alone: `python -m atoll.bench.robust_json [--requests 4] [--mb 60]` (bench/results/robust_json.json).
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import onnx
from gpu_runtime.zoo import build
from gpu_runtime.zoo.repository import write_model
from onnx import TensorProto, helper

from atoll.bench.harness import emit
from atoll.supervisor.server_process import ServerProcess

MODEL = "mobilenet_v3_small"
WIDE = "wide"
POLL_S = 0.01  # between two health (or metadata) requests of the poller


def wide_model(repo: Path, elements: int) -> None:
    """A model whose input is `elements` FP32 values a row: y = ReduceSum(x) (one value a row)."""
    graph = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=1)], "wide",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", elements])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (repo / WIDE / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(repo / WIDE / "1" / "model.onnx"))
    (repo / WIDE / "config.pbtxt").write_text(
        f'name: "{WIDE}"\nbackend: "onnxruntime"\nmax_batch_size: 1\n'
        f'input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {elements} ] }} ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n')  # fmt: skip


def json_body(name: str, shape: list[int], elements: int) -> bytes:
    """A JSON infer body of `elements` 0.5s, written as json.dumps writes them (5 bytes a value)."""
    head = json.dumps({"inputs": [{"name": name, "datatype": "FP32", "shape": shape}]})[:-3].encode()
    return head + b', "data": [' + b"0.5, " * (elements - 1) + b"0.5]}]}"


def _send(address: tuple[str, int], path: str, body: bytes) -> dict:
    """One request on its own connection: its status, answer and seconds from the first byte sent."""
    sock = socket.create_connection(address)
    head = f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    start = time.perf_counter()
    sender = threading.Thread(target=_send_all, args=(sock, head.encode(), body), daemon=True)
    sender.start()
    response = http.client.HTTPResponse(sock)
    response.begin()
    seconds = time.perf_counter() - start
    answer = response.read()
    sender.join(60)
    sock.close()
    return {"status": response.status, "seconds": seconds, "answer": answer}


def _send_all(sock: socket.socket, head: bytes, body: bytes) -> None:
    try:
        sock.sendall(head)
        sock.sendall(body)
    except OSError:  # the server answered and closed first
        pass


class Poller:
    """GETs `paths` in turn every POLL_S on one connection while running; their latencies."""

    def __init__(self, address: tuple[str, int], paths: list[str]):
        self.address, self.paths = address, paths
        self.seconds: dict[str, list[float]] = {p: [] for p in paths}
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        connection = http.client.HTTPConnection(*self.address, timeout=30)
        while not self._stop.is_set():
            for path in self.paths:
                start = time.perf_counter()
                try:
                    connection.request("GET", path)
                    connection.getresponse().read()
                    self.seconds[path].append(time.perf_counter() - start)
                except (OSError, http.client.HTTPException):
                    self.failures += 1
                    connection = http.client.HTTPConnection(*self.address, timeout=30)
            self._stop.wait(POLL_S)

    def summary(self) -> dict:
        out = {"failures": self.failures}
        for path, seconds in self.seconds.items():
            ms = sorted(s * 1e3 for s in seconds)
            out[path] = {"n": len(ms), "p50_ms": round(statistics.median(ms), 2) if ms else None,
                         "p99_ms": round(ms[int(0.99 * (len(ms) - 1))], 2) if ms else None,
                         "max_ms": round(ms[-1], 2) if ms else None}  # fmt: skip
        return out


def peak_rss_mb(pids) -> dict[int, float]:
    """Each process's peak resident memory so far (VmHWM), MB."""
    out = {}
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            out[pid] = next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024
    return out


def _round(server: ServerProcess, model: str, body: bytes, requests: int) -> list[dict]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    results: list[dict] = [{}] * requests

    def one(i: int) -> None:
        results[i] = _send((host, int(port)), f"/v2/models/{model}/infer", body)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def json_step(server: ServerProcess, requests: int, elements: int) -> dict:
    """The step on a server serving MODEL and a `wide_model` of `elements`."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    pids = set().union(*server.children().values(), {server.proc.pid})
    wrong = json_body("input", [1, elements], elements)
    right = json_body("x", [1, elements], elements)
    doc = {"requests": requests, "body_mb": round(len(right) / 1e6, 1), "tensor_mb": round(elements * 4 / 1e6, 1)}
    for label, model, body in (("wrong_shape", MODEL, wrong), ("right_shape", WIDE, right)):
        before = peak_rss_mb(pids)
        with Poller((host, int(port)), ["/v2/health/ready", f"/v2/models/{MODEL}"]) as poller:
            results = _round(server, model, body, requests)
        after = peak_rss_mb(pids)
        growth = sum(after[p] - before[p] for p in pids)
        in_flight_mb = requests * (len(body) + (elements * 4 if label == "right_shape" else 0)) / 1e6
        doc[label] = {"statuses": sorted({r["status"] for r in results}),
                      "answer_ms": sorted(round(r["seconds"] * 1e3, 1) for r in results),
                      "first_answer": json.loads(results[0]["answer"]),
                      "peak_rss_growth_mb": round(growth, 1), "body_and_tensor_mb_in_flight": round(in_flight_mb, 1),
                      "growth_over_in_flight": round(growth / in_flight_mb, 2), "meanwhile": poller.summary()}  # fmt: skip
    return doc


def summary(doc: dict) -> list[str]:
    lines = []
    for label in ("wrong_shape", "right_shape"):
        step, meanwhile = doc[label], doc[label]["meanwhile"]
        health = meanwhile["/v2/health/ready"]
        lines.append(f"json {label}: {doc['requests']} x {doc['body_mb']} MB answered {step['statuses']} in "
                     f"{step['answer_ms'][0]}-{step['answer_ms'][-1]} ms; peak RSS +{step['peak_rss_growth_mb']} MB "
                     f"({step['growth_over_in_flight']}x of {step['body_and_tensor_mb_in_flight']} MB in flight); "
                     f"health p99 {health['p99_ms']} ms (max {health['max_ms']})")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4, help="concurrent requests (default 4)")
    parser.add_argument("--mb", type=float, default=60.0, help="size of each body (default 60 MB)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/robust_json.json"))
    args = parser.parse_args(argv)
    elements = int(args.mb * 1e6 / 5)
    with tempfile.TemporaryDirectory(prefix="atoll-robust-json-") as root:
        write_model(Path(root), MODEL, build(MODEL))
        wide_model(Path(root), elements)
        serve = ["--repository", root, "--backend", "cpu", "--set", f"server.max_request_bytes={int(args.mb * 1.1e6)}"]
        with ServerProcess(serve) as server:
            doc = {"server_args": serve, "json": json_step(server, args.requests, elements)}
    emit(doc, args.out, False, summary(doc["json"]))
    return 0


if __name__ == "__main__":
    main()
