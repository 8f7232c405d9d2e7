"""`atoll serve --cluster local:2` stopped as a service manager or a terminal stops it (issue 41):
SIGTERM or SIGINT, to its whole process group (systemd's `KillMode=control-group`, Ctrl-C) or to it
alone. It logs `stopped`, exits 0, and leaves none of its processes behind (raylets, Ray's workers,
the nodes' `atoll serve`); before, a signal to the group killed the raylets under it and it hung on
Ray for 60 s, then exited 1.

Each case starts its own cluster (about 20 s on a 2-core machine); every wait is bounded
by probes.PATIENCE_S.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
from tests.atoll.probes import PATIENCE_S, alive, request, until
from tests.gpu_runtime.chain_model import matmul_chain

from atoll.supervisor.server_process import ServerProcess

pytest.importorskip("ray", reason="ray is not installed (the cluster extra)")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(4 * PATIENCE_S)]

MODEL = "tiny"  # one small MatMul: the nodes start fast


def descendants(pid: int) -> set[int]:
    """Every process under `pid` now (whatever session or group each leads)."""
    parents = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except FileNotFoundError:  # gone meanwhile
            continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:  # ended meanwhile
        return ""


# each signal and each target once (a cluster start is most of a case's minute): TERM to the
# group as systemd's KillMode=control-group sends it, INT to the main process as `kill -INT` does
@pytest.mark.parametrize(("sig", "to"), [(signal.SIGTERM, "group"), (signal.SIGINT, "main")],
                         ids=["TERM-group", "INT-main"])
def test_the_cluster_stops_on_a_signal_and_leaves_nothing(tmp_path, sig, to):
    (tmp_path / MODEL / "1").mkdir(parents=True)
    matmul_chain(tmp_path / MODEL / "1" / "model.onnx", np.random.default_rng(0), layers=1, width=8)
    server = ServerProcess(["--cluster", "local:2", "--repository", str(tmp_path), "--backend", "cpu",
                            "--set", "vgpus.cpu_vgpus=1", "--front-ends", "1"],
                           start_timeout_s=PATIENCE_S, new_session=True)  # fmt: skip
    with server:
        until(lambda: request(f"{server.url}/v2/models/{MODEL}/ready") == 200, "a node serves the model")
        processes = descendants(server.proc.pid)
        commands = [command(pid) for pid in processes]
        assert sum("raylet/raylet" in c for c in commands) == 2 and sum("-m atoll serve" in c for c in commands) == 2
        (os.killpg if to == "group" else os.kill)(server.proc.pid, sig)
        code = server.proc.wait(PATIENCE_S)
        log = "\n".join(server.log)
    assert code == 0, log[-3000:]
    assert f"stopping on {sig.name}" in log and "lifecycle: stopped" in log, log[-3000:]
    until(lambda: not any(alive(pid) for pid in processes), "every process of the cluster ends")
