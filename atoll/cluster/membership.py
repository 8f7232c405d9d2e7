"""The cluster's controller: a detached, named Ray actor holding one AtollNode per Ray node.

Every RECONCILE_S it starts an AtollNode on each alive Ray node offering the `atoll_node` resource
that has none, forgets those of nodes that left, and asks each node (one question in flight at a
time) whether it is ready; `nodes()` answers from the last answers. The endpoint's directory waits
in `nodes_after` until they change, so an idle endpoint asks about once per WAIT_S, not twice a
second (each ask ~2.5 CPU-ms of Ray's in the endpoint: docs/cluster.md).
"""

from __future__ import annotations

import logging
import threading

from atoll.cluster.directory import NodeAddress
from atoll.cluster.nodes import RESOURCE, AtollNode, node_name

log = logging.getLogger(__name__)

NAMESPACE = "atoll"
CONTROLLER = "atoll-cluster"
RECONCILE_S = 1.0
CONCURRENCY = 32  # the controller's threads: each endpoint's directory holds one while it waits


class ClusterController:
    """The controller actor's body (wrapped with `ray.remote` by `start_controller`)."""

    def __init__(self, repository: str, models: list[str], extra: list[str]):
        self.repository, self.models, self.extra = repository, list(models), list(extra)
        self._actors: dict[str, object] = {}  # Ray node id -> its AtollNode actor handle
        self._asks: dict[str, tuple] = {}  # Ray node id -> its (ready, address) question in flight
        self._found: dict[str, NodeAddress | None] = {}  # Ray node id -> its address if ready
        self._ready: list[NodeAddress] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # `_ready` changed, or the controller stops
        self._stop = threading.Event()
        threading.Thread(target=self._loop, daemon=True, name="atoll-reconcile").start()

    def _loop(self) -> None:
        while not self._stop.wait(RECONCILE_S):
            try:
                self.reconcile()
            except Exception:  # a failed round (Ray busy, a node going) is retried next round
                log.exception("reconcile failed")

    def reconcile(self) -> None:
        self._place(offering_nodes())
        self._collect(self._ask())

    def _place(self, offering: set[str]) -> None:
        """An Atoll node on each Ray node in `offering` without one; none kept for those not in it."""
        import ray  # optional dependency: only the cluster needs it
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        with self._lock:
            if self._stop.is_set():  # shut down meanwhile: start nothing more
                return
            for node_id in set(self._actors) - offering:
                log.info("node %s left", node_name(node_id))
                del self._actors[node_id]
                self._asks.pop(node_id, None)
                self._found.pop(node_id, None)
            for node_id in offering - set(self._actors):
                log.info("node %s joined: starting Atoll on it", node_name(node_id))
                self._actors[node_id] = ray.remote(AtollNode).options(
                    resources={RESOURCE: 1}, num_cpus=0, max_restarts=-1,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                ).remote(node_name(node_id), self.repository, self.models, self.extra)  # fmt: skip

    def _ask(self) -> dict[str, tuple]:
        """Each node's (ready, address) question, a new one for each node whose last was answered."""
        with self._lock:
            for node_id, actor in self._actors.items():
                if node_id not in self._asks:
                    self._asks[node_id] = (actor.ready.remote(), actor.address.remote())
            return dict(self._asks)

    def _collect(self, asks: dict[str, tuple]) -> None:
        """The answers that come within RECONCILE_S; the ready nodes as they say."""
        import ray  # optional dependency: only the cluster needs it

        refs = [ref for pair in asks.values() for ref in pair]
        answered = set(ray.wait(refs, num_returns=len(refs), timeout=RECONCILE_S)[0])
        with self._lock:
            for node_id, ask in asks.items():
                is_ready, address = ask
                if self._asks.get(node_id) is not ask or not {is_ready, address} <= answered:
                    continue  # forgotten meanwhile, or not answered yet
                del self._asks[node_id]
                try:
                    self._found[node_id] = ray.get(address) if ray.get(is_ready) else None
                except ray.exceptions.ActorUnavailableError:  # Ray is restarting it
                    self._found[node_id] = None
                except ray.exceptions.ActorDiedError:  # for good (killed without restart): placed anew
                    self._found.pop(node_id, None)
                    self._actors.pop(node_id, None)
            ready = sorted((a for a in self._found.values() if a is not None), key=lambda a: a.name)
            if ready != self._ready:
                self._ready = ready
                self._changed.notify_all()

    def nodes(self) -> list[NodeAddress]:
        with self._lock:
            return list(self._ready)

    def nodes_after(self, known: list[NodeAddress], wait_s: float) -> list[NodeAddress]:
        """The ready nodes once they differ from `known`, or after `wait_s` as they are (a thread of
        the actor's `max_concurrency` held meanwhile)."""
        with self._changed:
            self._changed.wait_for(lambda: self._ready != known or self._stop.is_set(), wait_s)
            return list(self._ready)

    def actors(self) -> dict[str, object]:
        """Each Atoll node's actor handle by node name (tests and `atoll cluster status`)."""
        with self._lock:
            return {node_name(node_id): a for node_id, a in self._actors.items()}

    def shutdown(self) -> None:
        """Stop every node's `atoll serve` cleanly, then the nodes; the controller is killed after."""
        import ray  # optional dependency: only the cluster needs it

        self._stop.set()
        with self._lock:
            actors, self._actors, self._ready = list(self._actors.values()), {}, []
            self._asks, self._found = {}, {}
            self._changed.notify_all()
        stops = [a.stop.remote() for a in actors]
        ray.wait(stops, num_returns=len(stops), timeout=60)
        for a in actors:
            ray.kill(a, no_restart=True)


def offering_nodes() -> set[str]:
    """The ids of the alive Ray nodes offering the `atoll_node` resource."""
    import ray  # optional dependency: only the cluster needs it

    return {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get(RESOURCE, 0) >= 1}


def start_controller(repository: str, models: list[str], extra: list[str]):
    """The running controller, or a new detached one (Ray connected in namespace "atoll")."""
    import ray  # optional dependency: only the cluster needs it

    return ray.remote(ClusterController).options(
        name=CONTROLLER, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        num_cpus=0, max_restarts=-1, max_concurrency=CONCURRENCY,
    ).remote(repository, models, extra)  # fmt: skip


def find_controller():
    """The running controller's handle, or None."""
    import ray  # optional dependency: only the cluster needs it

    try:
        return ray.get_actor(CONTROLLER, namespace=NAMESPACE)
    except ValueError:  # no actor of that name
        return None


def stop_controller() -> bool:
    """Stop the cluster's nodes and its controller; False when none ran."""
    import ray  # optional dependency: only the cluster needs it

    controller = find_controller()
    if controller is None:
        return False
    ray.get(controller.shutdown.remote())
    ray.kill(controller, no_restart=True)
    return True
