"""`atoll serve` stopped as service managers stop it, end to end (issue #35).

systemd's default KillMode=control-group, `timeout` and Ctrl-C signal every process of the server at
once; the supervisor once restarted the vGPU worker that signal killed, and a traceback followed.
Here the server is stopped during a closed loop of requests by SIGTERM to its process group, to its
main process alone, and by SIGINT to the group: every request is answered or refused, nothing is
restarted, nothing prints a traceback, no request is left unanswered at the drain's end, and every
child is gone. A fake $NOTIFY_SOCKET hears READY=1 only once the health endpoint says ready, and
STOPPING=1 at the stop; the log is in journald's format when asked. Nothing waits on a fixed sleep; the bounds are generous (PATIENCE_S).
"""

from __future__ import annotations

import os
import signal
import socket
from collections import Counter

import pytest
from gpu_runtime.zoo import build
from gpu_runtime.zoo.repository import write_model
from tests.atoll.probes import PATIENCE_S, ClosedLoop, alive, request, until

from atoll.bench.bodies import infer_body
from atoll.bench.corpus import jpeg_bytes
from atoll.supervisor.server_process import ServerProcess

MODEL = "mobilenet_v3_small"
CLIENTS = 4
# What a client may see: an answer, a refusal (503 while the server drains), or, once the front ends
# close their ports and connections, its connection refused, or closed before its whole request was
# sent (none in hand is cut: the server logs any request left at the drain's end, checked below).
ANSWERED = {200}
REFUSED = {503, "ConnectionRefusedError", "ConnectionResetError", "RemoteDisconnected", "BrokenPipeError"}
PHASES = ("stopping on {sig}", "front ends stopped", "vGPU workers stopped", "lifecycle: stopped")


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    write_model(root, MODEL, build(MODEL))
    return root


def server(repository, env: dict[str, str] | None = None, *args: str) -> ServerProcess:
    return ServerProcess(["--repository", str(repository), "--backend", "cpu", "--set", "vgpus.cpu_vgpus=1",
                          "--set", f"server.drain_s={PATIENCE_S}", *args], env=env, new_session=True)  # fmt: skip


@pytest.mark.parametrize(("sig", "to_group"), [(signal.SIGTERM, True), (signal.SIGTERM, False),
                                               (signal.SIGINT, True)], ids=["TERM-group", "TERM-main", "INT-group"])
def test_a_stop_signal_during_a_closed_loop_stops_everything_in_order(repository, sig, to_group):
    body, headers = infer_body("image", [jpeg_bytes(320, 240, seed=3)])
    with server(repository) as s:
        with ClosedLoop(f"{s.url}/v2/models/{MODEL}/infer", body, headers, CLIENTS, until_refused=True) as load:
            until(lambda: load.count(200) >= 8, "requests succeed before the signal")
            children = set().union(*s.children().values())
            assert children  # a front end and a vGPU worker at least
            if to_group:
                os.killpg(s.proc.pid, sig)
            else:
                os.kill(s.proc.pid, sig)
            code = s.proc.wait(PATIENCE_S + 60)  # the drain, then the children's exit
        until(lambda: not any(map(alive, children)), "every child of the server is gone")
    log = "\n".join(s.log)
    assert code == 0, log
    assert len(load.outcomes) == load.sent, "a request got no outcome"
    kinds = Counter(o for _, o in load.outcomes)
    assert set(kinds) <= ANSWERED | REFUSED, kinds
    assert "Traceback" not in log and "restarting" not in log, log
    assert "still in flight after server.drain_s" not in log, log  # nothing admitted was cut
    lines = [line for phase in PHASES for line in s.log if phase.format(sig=sig.name) in line]
    assert len(lines) == len(PHASES), lines  # one line per phase, in this order
    assert [s.log.index(line) for line in lines] == sorted(s.log.index(line) for line in lines)


def test_the_service_manager_hears_ready_once_health_says_so_and_stopping_at_the_stop(repository, tmp_path):
    manager = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    manager.bind(str(tmp_path / "notify"))
    manager.settimeout(PATIENCE_S)
    heard: list[str] = []

    def hear_until(key: str) -> None:
        while key not in heard:
            heard.extend(manager.recv(4096).decode().splitlines())

    env = {"NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "60000000"}
    with manager, server(repository, env, "--log-format", "journal") as s:
        hear_until("READY=1")
        # ready the moment it says so: every front end knows every model is loaded
        assert request(f"{s.url}/v2/health/ready") == 200
        before = heard[: heard.index("READY=1")]
        assert before and all(line.startswith("STATUS=") or line == "WATCHDOG=1" for line in before), heard
        assert "WATCHDOG=1" in heard  # fed from the start
        assert heard[heard.index("READY=1") + 1].startswith(f"STATUS=serving on {s.url}"), heard
        os.killpg(s.proc.pid, signal.SIGTERM)
        hear_until("STOPPING=1")
        assert s.proc.wait(PATIENCE_S + 60) == 0
    assert any(line.startswith("STATUS=stopping") for line in heard[heard.index("STOPPING=1"):]), heard
    # journald's lines: a priority first, no timestamp (journald adds its own)
    assert "<6>atoll.supervisor.lifecycle: stopped" in s.log, s.log
