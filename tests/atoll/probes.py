"""Requests to and waits on a live `atoll serve` without fixed sleeps, for the end-to-end robustness
tests."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from gpu_runtime.zoo import build
from gpu_runtime.zoo.repository import write_model

from atoll.supervisor.server_process import ServerProcess

PATIENCE_S = 120  # the bound on any one wait: generous, for a loaded 2-core machine


def until(condition, what: str):
    """`condition()`'s first true result, polled; AssertionError naming `what` after PATIENCE_S."""
    deadline = time.monotonic() + PATIENCE_S
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {PATIENCE_S} s: {what}")
        time.sleep(0.05)
    return result


def http_answers(sock: socket.socket, count: int = 1) -> list[tuple[int, dict, bytes]]:
    """`count` whole HTTP answers read from `sock` (status, headers in lower case, body; a 100
    Continue passed over)."""
    data, out = b"", []
    while len(out) < count:
        end = data.find(b"\r\n\r\n")
        if end >= 0 and data.startswith(b"HTTP/1.1 100 "):
            data = data[end + 4:]
            continue
        if end >= 0:
            lines = data[:end].decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
            length = int(headers["content-length"])
            if len(data) >= end + 4 + length:
                out.append((int(lines[0].split()[1]), headers, data[end + 4:end + 4 + length]))
                data = data[end + 4 + length:]
                continue
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} answers")
        data += chunk
    return out


def request(url: str, body: bytes = b"", headers: dict | None = None) -> int | str:
    """The status of one request, or the name of the connection error that ended it: exactly one."""
    req = urllib.request.Request(url, data=body or None, headers=headers or {}, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(req, timeout=PATIENCE_S) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        e.read()
        return e.code
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return type(getattr(e, "reason", e)).__name__


class ClosedLoop:
    """`clients` threads each sending `body` to `url` again as soon as it is answered, until the
    `with` block ends; `outcomes` holds every request's (monotonic time answered, `request` outcome)
    and `sent` how many were sent. With `until_refused`, a client whose connection is refused (the
    server has gone) stops sending."""

    def __init__(self, url: str, body: bytes, headers: dict, clients: int, until_refused: bool = False):
        self.url, self.body, self.headers, self.until_refused = url, body, headers, until_refused
        self.sent = 0
        self.outcomes: list[tuple[float, int | str]] = []
        self._lock, self._done = threading.Lock(), threading.Event()
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(clients)]

    def _client(self) -> None:
        while not self._done.is_set():
            with self._lock:
                self.sent += 1
            outcome = request(self.url, self.body, self.headers)
            with self._lock:
                self.outcomes.append((time.monotonic(), outcome))
            if self.until_refused and outcome == "ConnectionRefusedError":
                return

    def count(self, outcome, after: float = float("-inf")) -> int:
        with self._lock:
            return sum(o == outcome and t > after for t, o in self.outcomes)

    def __enter__(self) -> ClosedLoop:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        for thread in self._threads:
            thread.join(PATIENCE_S)


def alive(pid: int) -> bool:
    """Whether `pid` is a process that has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def metric(url: str, name: str) -> float:
    """The sum of every series of Prometheus metric `name` the server at `url` exports."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=PATIENCE_S) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def zoo_repository(root: Path, *models: str) -> Path:
    """A Triton-layout repository at `root` holding the zoo's `models`."""
    for model in models:
        write_model(root, model, build(model))
    return root


@contextlib.contextmanager
def serving(root: Path, model: str, *args: str):
    """`atoll serve` (CPU backend, one CPU vGPU) on a repository at `root` holding zoo `model`,
    with `args` on top; it must stop cleanly."""

    zoo_repository(root, model)
    with ServerProcess(["--repository", str(root), "--backend", "cpu", "--set", "vgpus.cpu_vgpus=1", *args]) as s:
        yield s
    assert s.proc.returncode == 0, "\n".join(s.log[-20:])
