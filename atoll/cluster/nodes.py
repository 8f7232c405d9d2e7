"""One Atoll node per Ray node: a Ray actor that runs `atoll serve` as its child process.

Ray places it (the `atoll_node` resource and the node's id) and restarts it (`max_restarts=-1`); the
actor lives exactly as long as its child: a child that dies ends the actor (so Ray starts a new
one), and a child whose actor ends, cleanly or killed, is killed too.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import urllib.error
import urllib.request

from atoll.cluster.directory import NodeAddress
from atoll.supervisor.server_process import ServerProcess, ServerStartError

RESOURCE = "atoll_node"  # the custom resource a Ray node offers (1) when it should run Atoll
METRICS = re.compile(r"\(metrics http://(\S+)/metrics\)")
READY_TIMEOUT_S = 2.0
# The child is killed when the actor's process ends, however it ends (Linux's PR_SET_PDEATHSIG, set by
# util-linux's setpriv, which then runs `atoll serve`): a raylet that goes kills its workers outright.
DIE_WITH_PARENT = ("setpriv", "--pdeathsig", "KILL")


def node_name(node_id: str) -> str:
    """The stable name of the Atoll node on Ray node `node_id` (hex)."""
    return node_id[:12]


def serve_args(host: str, repository: str, models: list[str], extra: list[str]) -> list[str]:
    """`atoll serve`'s arguments on a node: free ports on the node's address, explicit model
    control with `models` loaded at start, then `extra` (which may override any of these)."""
    loads = [arg for model in models for arg in ("--load-model", model)]
    return ["--host", host, "--metrics-port", "0", "--repository", repository,
            "--model-control-mode", "explicit", *loads, *extra]  # fmt: skip


class AtollNode:
    """The Ray actor's body (wrapped with `ray.remote` by the controller): `atoll serve` started at
    construction, its address, its readiness."""

    def __init__(self, name: str, repository: str, models: list[str], extra: list[str]):
        import ray  # optional dependency: only the cluster needs it

        self.name = name
        self._stopping = threading.Event()
        host = ray.util.get_node_ip_address()
        server = ServerProcess(serve_args(host, repository, models, extra), new_session=True,
                               launcher=DIE_WITH_PARENT)
        try:
            self.server = server.__enter__()
        except ServerStartError as exc:  # a failed start is a crash: Ray starts the actor again
            print(exc, file=sys.stderr, flush=True)
            os._exit(1)
        metrics = next((m.group(1) for line in self.server.log if (m := METRICS.search(line))), "")
        self._address = NodeAddress(name, self.server.url.removeprefix("http://"), self.server.grpc_address, metrics,
                                    self.server.local_http)  # fmt: skip
        threading.Thread(target=self._watch, daemon=True, name="atoll-child-watch").start()

    def _watch(self) -> None:
        """The child ended: unless asked to stop, end the actor so Ray starts a new one."""
        self.server.proc.wait()
        self._kill_group()
        if not self._stopping.is_set():
            os._exit(1)  # an exit Ray counts as a failure, so it restarts the actor

    def _kill_group(self) -> None:
        """The child's process group (its front ends and workers too) ends with it."""
        try:
            os.killpg(self.server.proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # every process of the group has already gone
            pass

    def address(self) -> NodeAddress:
        return self._address

    def ready(self) -> bool:
        """Whether the child answers /v2/health/ready with 200."""
        try:
            with urllib.request.urlopen(f"{self.server.url}/v2/health/ready", timeout=READY_TIMEOUT_S) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):  # refused, timed out or answered not ready
            return False

    def pid(self) -> int:
        """The child's process id (for tests and `atoll cluster status`)."""
        return self.server.proc.pid

    def stop(self) -> int | None:
        """Stop the child cleanly (SIGINT, its drain); the actor can then be killed without a restart."""
        self._stopping.set()
        code = self.server.stop()
        self._kill_group()
        return code
