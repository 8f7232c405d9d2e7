"""The plain Python model server users pick instead of Atoll: `atoll bench serve --baseline plain`.

What a competent engineer builds from OpenCV and onnxruntime alone, written to be fast: one worker
process per core, pre-forked over one listening socket, each calling a blocking `accept()` only when
idle and answering one request per connection (a kept-alive connection would stay with a busy
worker); per request OpenCV (`fpga_host.cpu_backend`, Atoll's CPU numerics) or librosa, then one
onnxruntime run on one thread, no batching; KServe v2 with binary tensors (`atoll.kserve.protocol`),
so it gets the very bytes Atoll gets. Run as `python -m atoll.bench.baseline_server --repository
DIR [--port 0] [--workers N]`; it prints `atoll: serving on URL` once every worker has its models.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys

import numpy as np
import onnxruntime as ort
from fpga_host import cpu_backend
from fpga_host.status import PreprocessError

from atoll.front_end.media import pad_stack, read_wav
from atoll.kserve.protocol import (
    HEADER_LENGTH,
    Output,
    ProtocolError,
    binary_outputs,
    decode_request,
    encode_response,
    requested_outputs,
)
from atoll.repository.specs import load_repository

MAX_BODY = 64 << 20
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           413: "Payload Too Large", 500: "Internal Server Error"}  # fmt: skip


class HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def media_rows(kind: str, files: list[bytes]) -> np.ndarray:
    """A batch from JPEG ("image") or WAV ("audio") files, one row each (audio padded to the
    longest): what the baselines do per request instead of Atoll's DPU and batcher."""
    if kind == "image":
        return np.stack([cpu_backend.image(f) for f in files])
    return pad_stack([cpu_backend.audio(*read_wav(f)) for f in files])


class Model:
    """One model of the repository in this worker: its onnxruntime session and preprocessing."""

    def __init__(self, spec):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.spec = spec
        self.session = ort.InferenceSession(str(spec.path), options, providers=["CPUExecutionProvider"])
        self.outputs = [o.name for o in spec.outputs]

    def rows(self, request) -> np.ndarray:
        inputs = {t.name: t for t in request.inputs}
        spec = self.spec
        if spec.preprocess != "none" and spec.raw_input in inputs:
            return media_rows(spec.preprocess, [bytes(b) for b in inputs[spec.raw_input].data.reshape(-1)])
        tensor = inputs.get(spec.inputs[0].name)
        if tensor is None or tensor.datatype != "FP32":
            raise ProtocolError(f"model {spec.name!r} needs input {spec.raw_input!r} or FP32 "
                                f"{spec.inputs[0].name!r}")  # fmt: skip
        return np.ascontiguousarray(tensor.data, dtype=np.float32)

    def infer(self, body: bytes, header_length: int | None) -> tuple[bytes, dict[str, str]]:
        request = decode_request(body, header_length)
        batch = self.rows(request)
        arrays = self.session.run(self.outputs, {self.spec.inputs[0].name: batch})
        by_name = dict(zip(self.outputs, arrays))
        outputs = [Output.of(name, by_name[name], params) for name, params in requested_outputs(request, self.outputs)]
        return encode_response(self.spec.name, self.spec.version, request.id, outputs,
                               binary_outputs(request, outputs))  # fmt: skip


def read_request(stream) -> tuple[str, str, dict[str, str], bytes]:
    """(method, path, headers with lower-case names, body) of one HTTP/1.1 request."""
    line = stream.readline(65537)
    parts = line.decode("latin-1").split()
    if len(parts) != 3:
        raise HttpError(400, "malformed request line")
    headers = {}
    while (line := stream.readline(65537)) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    if length > MAX_BODY:
        raise HttpError(413, f"body of {length} bytes exceeds {MAX_BODY}")
    return parts[0], parts[1], headers, stream.read(length)


def respond(conn: socket.socket, status: int, body: bytes, headers: dict[str, str]) -> None:
    head = [f"HTTP/1.1 {status} {REASONS.get(status, '')}", f"Content-Length: {len(body)}",
            "Connection: close", *(f"{k}: {v}" for k, v in headers.items())]  # fmt: skip
    conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)


def handle(models: dict[str, Model], method: str, path: str, headers: dict[str, str],
           body: bytes) -> tuple[int, bytes, dict[str, str]]:
    if path in ("/v2/health/ready", "/v2/health/live"):
        return 200, b"", {}
    parts = path.strip("/").split("/")
    if len(parts) != 4 or parts[:2] != ["v2", "models"] or parts[3] != "infer":
        raise HttpError(404, f"no route {path}")
    if method != "POST":
        raise HttpError(405, "infer takes POST")
    model = models.get(parts[2])
    if model is None:
        raise HttpError(404, f"unknown model {parts[2]!r}")
    header = headers.get(HEADER_LENGTH.lower())
    try:
        payload, out_headers = model.infer(body, int(header) if header else None)
    except (ProtocolError, PreprocessError, ValueError) as exc:
        raise HttpError(400, str(exc)) from None
    return 200, payload, out_headers


def serve(listener: socket.socket, models: dict[str, Model]) -> None:
    while True:
        conn, _ = listener.accept()
        with conn, conn.makefile("rb") as stream:
            try:
                status, body, headers = handle(models, *read_request(stream))
            except HttpError as exc:
                status, body, headers = exc.status, json.dumps({"error": str(exc)}).encode(), {}
            except Exception as exc:  # a model failure is answered, never a dropped connection
                status, body, headers = 500, json.dumps({"error": f"inference failed: {exc}"}).encode(), {}
            try:
                respond(conn, status, body, headers)
            except OSError:  # the client went away
                pass


def _die_with_parent(parent: int) -> None:
    """A worker ends with the server that started it, however that ends (Linux's PR_SET_PDEATHSIG):
    a server killed outright would otherwise leave its workers serving nobody."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it ended before the request took effect
        os._exit(0)


def worker_main(fd: int, repository: str, parent: int) -> None:
    _die_with_parent(parent)
    cpu_backend.init_worker()
    listener = socket.socket(fileno=fd)
    models = {name: Model(spec) for name, spec in load_repository(repository).items()}
    print("ready", flush=True)
    serve(listener, models)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m atoll.bench.baseline_server", description=__doc__.split("\n")[0])
    p.add_argument("--repository", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                   help="worker processes (default: one per core)")
    p.add_argument("--worker-fd", type=int, help=argparse.SUPPRESS)  # set in the workers it starts
    p.add_argument("--parent", type=int, help=argparse.SUPPRESS)  # likewise: the server's pid
    args = p.parse_args(argv)
    if args.worker_fd is not None:
        worker_main(args.worker_fd, args.repository, args.parent)
        return 0
    listener = socket.create_server((args.host, args.port), backlog=4096)
    fd = listener.fileno()
    workers = [subprocess.Popen([sys.executable, "-m", "atoll.bench.baseline_server", "--repository",
                                 args.repository, "--worker-fd", str(fd), "--parent", str(os.getpid())], pass_fds=(fd,),
                                stdout=subprocess.PIPE, text=True) for _ in range(args.workers)]  # fmt: skip
    for w in workers:
        if w.stdout.readline().strip() != "ready":
            raise SystemExit(f"baseline worker {w.pid} failed to start")
    host, port = listener.getsockname()[:2]
    print(f"atoll: serving on http://{host}:{port} (plain Python baseline, {len(workers)} workers)", flush=True)
    try:
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        while True:
            signal.pause()
    except KeyboardInterrupt:  # SIGINT or SIGTERM: stop the workers with it
        return 0
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait()


if __name__ == "__main__":
    sys.exit(main())
