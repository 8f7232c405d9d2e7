"""A real `atoll serve` on its local socket (`http/local_socket.py`): it gives the socket's address
out, its front ends answer infer calls there as on its port, under the same restrictions (a
restricted call without its header is refused there too), and it stops cleanly; it gives none out
when `server.http_local_socket` is off."""

from __future__ import annotations

import socket

import numpy as np
from tests.atoll.probes import http_answers
from tests.atoll.supervisor.test_failing_models import SERVER
from tests.atoll.user_models import FP32_PAIR_CONFIG, fp32_pair, write

from atoll.bench.bodies import http_body
from atoll.http.local_socket import reachable
from atoll.supervisor.server_process import ServerProcess

X = np.arange(16, dtype=np.float32).reshape(1, 16)


def _infer(headers: dict) -> bytes:
    body, own = http_body("x", "FP32", [1, 16], X.tobytes())
    head = "".join(f"{k}: {v}\r\n" for k, v in {**own, **headers}.items())
    head = f"POST /v2/models/good/infer HTTP/1.1\r\nHost: h\r\nContent-Length: {len(body)}\r\n{head}\r\n"
    return head.encode() + body


def _ask(connect, raw: bytes) -> tuple[int, bytes]:
    sock = connect()
    with sock:
        sock.settimeout(60)
        sock.sendall(raw)
        status, _, body = http_answers(sock, 1)[0]
    return status, body


def test_the_local_socket_answers_as_the_port_under_the_same_restrictions(tmp_path):
    write(tmp_path, "good", fp32_pair(), FP32_PAIR_CONFIG)
    args = ["--repository", str(tmp_path), *SERVER, "--model-control-mode", "explicit", "--load-model", "good",
            "--http-restricted-api", "inference:Atoll-Key=k", "--front-ends", "2"]  # fmt: skip
    with ServerProcess(args) as server:
        name = reachable(server.local_http)
        assert name is not None, server.local_http

        def local():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect("\0" + name)
            return sock

        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        tcp = [_ask(lambda: socket.create_connection((host, int(port))), _infer(h)) for h in ({"Atoll-Key": "k"}, {})]
        here = [_ask(local, _infer(h)) for h in [{"Atoll-Key": "k"}] * 6 + [{}]]  # each on a connection of its own
    assert server.proc.returncode == 0, "\n".join(server.log[-20:])
    assert [s for s, _ in here] == [200] * 6 + [403] and [s for s, _ in tcp] == [200, 403]
    assert all(body == tcp[0][1] for _, body in here[:6]) and tcp[0][1].endswith((X * 2).tobytes())  # z = 2x


def test_no_local_socket_is_given_out_when_it_is_off(tmp_path):
    write(tmp_path, "good", fp32_pair(), FP32_PAIR_CONFIG)
    args = ["--repository", str(tmp_path), *SERVER, "--set", "server.http_local_socket=false"]
    with ServerProcess(args) as server:
        assert server.local_http == ""
    assert server.proc.returncode == 0 and not any("local socket" in line for line in server.log)
