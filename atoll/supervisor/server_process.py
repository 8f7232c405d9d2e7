"""`atoll serve` as a child process on a free port, for the demo and end-to-end tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading

READY = re.compile(r"atoll: serving on (http://\S+)(?: and grpc://(\S+))?")
LOCAL = re.compile(r"HTTP also on the local socket (\S+)")
FRONT_END = re.compile(r"front end (\d+) (?:listening|is back) \(pid (\d+)\)")


class ServerStartError(RuntimeError):
    pass


class ServerProcess:
    """Starts `atoll serve` on free HTTP and gRPC ports, waits for its ready line, and stops it with
    SIGINT. `url` is its HTTP URL, `grpc_address` its gRPC host:port, `local_http` its HTTP port's
    local twin ("": none; `atoll.http.local_socket`); with `new_session` it leads a
    process group of its own (which can then be signalled as a service manager does); `launcher`
    is a command that runs it (e.g. one that ties its life to this process's)."""

    def __init__(self, extra_args: list[str] | None = None, start_timeout_s: float = 600.0,
                 env: dict[str, str] | None = None, new_session: bool = False, launcher: tuple[str, ...] = ()):  # fmt: skip
        # -P: the server imports the atoll this process imported (PYTHONPATH, else the installed
        # one), never one that happens to sit in the working directory, which `-m` would put first
        self.args = [*launcher, sys.executable, "-P", "-m", "atoll", "serve", "--http-port", "0", "--grpc-port", "0",
                     "--metrics-port", "-1", *(extra_args or [])]  # fmt: skip
        self.start_timeout_s = start_timeout_s
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.grpc_address = ""
        self.local_http = ""
        self.log: list[str] = []
        self.new_session = new_session

    def __enter__(self) -> "ServerProcess":
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=self.env, start_new_session=self.new_session)  # fmt: skip
        found = threading.Event()

        def pump() -> None:  # keep reading so the child never blocks on a full pipe
            for line in self.proc.stdout:
                self.log.append(line.rstrip())
                if m := LOCAL.search(line):
                    self.local_http = m.group(1)
                m = READY.search(line)
                if m and not found.is_set():
                    self.url, self.grpc_address = m.group(1), m.group(2) or ""
                    found.set()
                if os.environ.get("ATOLL_SERVER_LOG"):  # show the server's log while debugging
                    sys.stderr.write(line)
            found.set()

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        if not found.wait(self.start_timeout_s) or not self.url:
            self.stop()
            tail = "\n".join(self.log[-20:])
            raise ServerStartError(f"atoll serve did not become ready:\n{tail}")
        return self

    def children(self) -> dict[str, set[int]]:
        """The server's child processes by kind: front ends (as their supervisor logs them) and
        vGPU workers (every other child but multiprocessing's resource tracker)."""
        front_ends = {}
        for line in list(self.log):
            if m := FRONT_END.search(line):
                front_ends[int(m.group(1))] = int(m.group(2))
        pid, children = self.proc.pid, set()
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    children.update(map(int, f.read().split()))
            except FileNotFoundError:  # a thread that ended meanwhile (asyncio.to_thread's, a pool's)
                pass
        workers = set()
        for child in children - set(front_ends.values()):
            try:
                with open(f"/proc/{child}/cmdline", "rb") as f:
                    if b"resource_tracker" not in f.read():
                        workers.add(child)
            except FileNotFoundError:  # it exited meanwhile
                pass
        return {"front_end": set(front_ends.values()), "vgpu": workers}

    def stop(self, timeout_s: float = 30.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def __exit__(self, *exc) -> None:
        self.stop()
        # the log whole: its last lines may still be in the pipe when the process has ended (a
        # grandchild that outlives it holds the pipe open: then not past this bound)
        self._pump.join(5)
