"""The endpoint's Directory over Ray: the controller's ready nodes, fetched by a background thread
every REFRESH_S, so a per-request `nodes()` (even on an event loop) never waits on Ray."""

from __future__ import annotations

import threading

from atoll.cluster.directory import NodeAddress
from atoll.cluster.membership import find_controller

REFRESH_S = 0.5
ASK_TIMEOUT_S = 10.0


class ControllerMissing(RuntimeError):
    pass


class RayDirectory:
    """The ready nodes of the cluster's controller (Ray connected in namespace "atoll"). While the
    controller cannot be asked (restarting), the last answer stands."""

    def __init__(self):
        import ray  # optional dependency: only the cluster needs it

        controller = find_controller()
        if controller is None:
            raise ControllerMissing("no Atoll cluster controller runs on this Ray cluster (atoll cluster up)")
        self._controller = controller
        self._nodes: list[NodeAddress] = ray.get(controller.nodes.remote(), timeout=ASK_TIMEOUT_S)
        self._closed = threading.Event()
        threading.Thread(target=self._refresh, daemon=True, name="atoll-ray-directory").start()

    def _refresh(self) -> None:
        import ray  # optional dependency: only the cluster needs it

        while not self._closed.wait(REFRESH_S):
            try:
                self._nodes = ray.get(self._controller.nodes.remote(), timeout=ASK_TIMEOUT_S)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):  # asked again next time
                pass

    def nodes(self) -> list[NodeAddress]:
        return list(self._nodes)  # replaced whole by the refresh, never changed in place

    def close(self) -> None:
        self._closed.set()
