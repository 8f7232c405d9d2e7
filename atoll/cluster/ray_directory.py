"""The endpoint's Directory over Ray: the controller's ready nodes, kept by a background thread
that waits at the controller until they change (`nodes_after`, at most WAIT_S), so a per-request
`nodes()` (even on an event loop) never waits on Ray, a change is seen at once, and an idle endpoint
asks once per WAIT_S: asked every half second, the asks were ~5 of the idle endpoint's 13 CPU-ms a
second (docs/cluster.md)."""

from __future__ import annotations

import threading

from atoll.cluster.directory import NodeAddress
from atoll.cluster.membership import find_controller

WAIT_S = 10.0  # the longest an ask waits at the controller for a change
ASK_TIMEOUT_S = 10.0  # beyond that wait
RETRY_S = 0.5  # after an ask that failed (the controller restarting), or of a controller that cannot wait


class ControllerMissing(RuntimeError):
    pass


class RayDirectory:
    """The ready nodes of the cluster's controller (Ray connected in namespace "atoll"). While the
    controller cannot be asked (restarting), the last answer stands."""

    def __init__(self, controller=None):
        """`controller`: the controller actor's handle (default: the running one, found by name)."""
        import ray  # optional dependency: only the cluster needs it

        controller = controller or find_controller()
        if controller is None:
            raise ControllerMissing("no Atoll cluster controller runs on this Ray cluster (atoll cluster up)")
        self._controller = controller
        self._nodes: list[NodeAddress] = ray.get(controller.nodes.remote(), timeout=ASK_TIMEOUT_S)
        self._closed = threading.Event()
        threading.Thread(target=self._refresh, daemon=True, name="atoll-ray-directory").start()

    def _refresh(self) -> None:
        import ray  # optional dependency: only the cluster needs it

        while not self._closed.is_set():
            try:
                self._nodes = ray.get(self._ask(), timeout=WAIT_S + ASK_TIMEOUT_S)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):  # asked again shortly
                self._closed.wait(RETRY_S)
            except Exception:
                if self._closed.is_set():  # Ray shut down under a waiting ask: the endpoint has stopped
                    return
                raise

    def _ask(self):
        try:
            return self._controller.nodes_after.remote(self._nodes, WAIT_S)
        except AttributeError:  # a detached controller started by an older Atoll: asked as it was
            self._closed.wait(RETRY_S)
            return self._controller.nodes.remote()

    def nodes(self) -> list[NodeAddress]:
        return list(self._nodes)  # replaced whole by the refresh, never changed in place

    def close(self) -> None:
        self._closed.set()
