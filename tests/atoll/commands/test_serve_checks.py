"""`atoll serve` with a mistake in its settings: one line naming what to fix, exit status 2, and no
worker or front end started (issue #35: the vGPU worker used to start first, then a traceback)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from gpu_runtime.executors import probe_executors
from tests.atoll.probes import PATIENCE_S, until

from atoll.cli import build_parser
from atoll.commands import serve
from atoll.observe.log_format import LOG_FORMAT_ENV
from atoll.observe.metrics import MULTIPROCESS_DIR
from atoll.supervisor.checks import reserve_port
from atoll.supervisor import parts, supervisor


@pytest.fixture
def no_process_starts(monkeypatch):
    """Any worker pool or front end the server would start fails the test (and the log format it
    passes on to children is this test's alone)."""
    monkeypatch.setenv(LOG_FORMAT_ENV, "plain")

    def started(*args, **kwargs):
        raise AssertionError("a process was started before the settings were checked")

    monkeypatch.setattr(parts, "WorkerPool", started)
    monkeypatch.setattr(supervisor, "FrontEndSupervisor", started)
    yield
    # nor was this process changed for the children it never started (their metrics' directory)
    assert MULTIPROCESS_DIR not in os.environ


@pytest.fixture
def taken_port():
    """A port another server of this user listens on, as Atoll's front ends do (SO_REUSEPORT)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def serve_with(*argv: str) -> int:
    return serve.run(build_parser().parse_args(["serve", "--log-format", "plain", *argv]))


def mistakes(tmp_path, taken_port) -> dict[str, tuple[list[str], str]]:
    """name -> (arguments, what the one line says)."""
    a_file = tmp_path / "file"
    a_file.write_text("")
    unknown_key = tmp_path / "unknown.toml"
    unknown_key.write_text("[server]\nhttp_prot = 8000\n")
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("[server\n")
    out = {
        "no repository": (["--repository", "/nonexistent/repo"],
                          "server.repository (--repository): /nonexistent/repo does not exist"),
        "repository is a file": (["--repository", str(a_file)],
                                 f"server.repository (--repository): {a_file} is not a directory"),
        "no config file": (["--config", str(tmp_path / "none.toml")], "config file not found"),
        "config not TOML": (["--config", str(bad_toml)], "not valid TOML"),
        "unknown key": (["--config", str(unknown_key)], "unknown key server.http_prot"),
        "negative drain": (["--set", "server.drain_s=-1"], "server.drain_s: must be >= 0"),
        "port taken": (["--http-port", str(taken_port)],
                       f"server.http_port (--http-port): cannot listen on 127.0.0.1:{taken_port}"),
        "one port twice": (["--http-port", "8123", "--grpc-port", "8123"],
                           "server.grpc_port (--grpc-port): 8123 is server.http_port too"),
        "no GPU": (["--set", "vgpus.mode=gpu"], "vgpus.mode: gpu cannot be used here"),
        "no XRT": (["--backend", "xrt"], "preprocessing.backend (--backend): xrt cannot be used here"),
        "unknown host": (["--host", "no.such.host.invalid"],
                         "server.host (--host): cannot use 'no.such.host.invalid'"),
        "no profile": (["--set", f"batching.profile={tmp_path / 'none.json'}"],
                       "batching.profile: cannot read profile"),
    }  # fmt: skip
    if not probe_executors()["cupy"]["available"]:
        out["no CuPy"] = (["--executor", "cupy"], "vgpus.executor (--executor): cupy cannot be used here")
    return out


def test_each_mistake_is_one_line_and_exit_2_before_any_process_starts(tmp_path, taken_port, no_process_starts,
                                                                       capsys):  # fmt: skip
    for name, (argv, says) in mistakes(tmp_path, taken_port).items():
        code = serve_with("--metrics-port", "-1", "--grpc-port", "0", "--http-port", "0", *argv)
        out, err = capsys.readouterr()
        assert (code, out) == (2, ""), name
        assert len(err.splitlines()) == 1 and err.startswith("atoll serve: ") and says in err, (name, err)


def test_the_command_line_of_the_issue_says_one_line_and_starts_nothing():
    done = subprocess.run([sys.executable, "-m", "atoll", "serve", "--repository", "/nonexistent/repo"],
                          check=False, capture_output=True, text=True, timeout=PATIENCE_S)  # fmt: skip
    assert done.returncode == 2
    assert (done.stdout, done.stderr) == (
        "", "atoll serve: server.repository (--repository): /nonexistent/repo does not exist\n")


def in_time_wait(port: int) -> bool:
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in list(f)[1:]]
    return any(row[1].endswith(f":{port:04X}") and row[3] == "06" for row in rows)


def test_a_port_whose_last_connections_are_in_time_wait_can_be_reserved():
    """What a restart finds: the previous server closed its connections first."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the front ends' listeners
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            accepted.close()  # the server's side closes first, so its port is left in TIME_WAIT
    until(lambda: in_time_wait(port), "the server's side of the connection is in TIME_WAIT")
    reserve_port("127.0.0.1", port).close()
