"""Connecting to a Ray cluster by the address the CLI takes, and the cluster's life as `atoll
cluster up` and `atoll serve --cluster` run it: the controller started (or found), its nodes awaited,
the endpoint served in the foreground over the controller's directory."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping

from atoll.cluster.directory import NodeAddress
from atoll.cluster.endpoint import serve_endpoint
from atoll.cluster.local import local_cluster, stop_local_cluster
from atoll.cluster.membership import (
    NAMESPACE,
    find_controller,
    offering_nodes,
    start_controller,
    stop_controller,
)
from atoll.cluster.ray_directory import RayDirectory
from atoll.config import Config
from atoll.kserve.restricted import Restrictions
from atoll.supervisor.lifecycle import shielded

LOCAL = "local:"
POLL_S = 0.5


class ClusterError(RuntimeError):
    pass


@contextlib.contextmanager
def connected(address: str) -> Iterator[object | None]:
    """Ray connected, in namespace "atoll", to `address`: `ray://HOST:PORT` (Ray Client), `auto` (the
    cluster this machine's `ray start` joined), a GCS `HOST:PORT`, or `local:N` (a new cluster of N
    raylets on this machine, yielded, and shut down on exit with everything on it)."""
    try:
        import ray  # optional dependency: only the cluster needs it
    except ModuleNotFoundError:
        raise ClusterError("Ray is not installed: pip install 'atoll[cluster]'") from None
    cluster = None
    if address.startswith(LOCAL):
        count = address.removeprefix(LOCAL)
        if not count.isdigit() or int(count) < 1:
            raise ClusterError(f"{address!r}: local:N wants a number of nodes N >= 1")
        # its processes never see a stop signal sent to the process group (a service manager's, Ctrl-C):
        # this process hears it and stops the nodes, then the cluster, in order (as `atoll serve` its children)
        with shielded():
            cluster = local_cluster(int(count))
        address = cluster.address
    try:
        try:
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
        except ConnectionError as exc:  # no Ray cluster there
            raise ClusterError(str(exc)) from None
        try:
            yield cluster
        finally:
            if cluster is not None:
                stop_controller()  # each atoll serve stops cleanly before its raylet goes
            ray.shutdown()
    finally:
        if cluster is not None:
            stop_local_cluster(cluster)


def _controller():
    controller = find_controller()
    if controller is None:
        raise ClusterError("no Atoll cluster controller runs on this Ray cluster (atoll cluster up)")
    return controller


def cluster_status() -> tuple[list[NodeAddress], list[str]]:
    """The controller's ready nodes, and the names of those starting."""
    import ray  # optional dependency: only the cluster needs it

    controller = _controller()
    ready = ray.get(controller.nodes.remote())
    return ready, sorted(set(ray.get(controller.actors.remote())) - {n.name for n in ready})


def wait_for_nodes(timeout_s: float, progress: Callable[[int, int], None] = lambda ready, wanted: None,
                   clock=time.monotonic) -> list[NodeAddress]:  # fmt: skip
    """The controller's ready nodes once every Ray node offering `atoll_node` has one; `progress`
    is told (ready, wanted) whenever either changes. ClusterError after `timeout_s`."""
    import ray  # optional dependency: only the cluster needs it

    controller = _controller()
    deadline, seen = clock() + timeout_s, None
    while True:
        nodes, wanted = ray.get(controller.nodes.remote()), len(offering_nodes())
        if (len(nodes), wanted) != seen:
            seen = (len(nodes), wanted)
            progress(*seen)
        if wanted and len(nodes) >= wanted:
            return nodes
        if clock() > deadline:
            raise ClusterError(f"{len(nodes)} of {wanted} Atoll nodes ready after {timeout_s:g} s")
        time.sleep(POLL_S)


def serve_cluster(address: str, repository: str, models: list[str], serve_args: list[str], config: Config,
                  restrictions: Restrictions | None = None,
                  replicas: Mapping[str, int] | None = None) -> None:  # fmt: skip
    """`atoll serve --cluster`: the controller started on the cluster at `address` (or the running
    one found), then the endpoint served by `config` until SIGINT or SIGTERM; a controller started
    here is stopped on exit."""
    with connected(address):
        started = find_controller() is None
        start_controller(repository, models, serve_args)
        directory = RayDirectory()
        try:
            serve_endpoint(directory, config, restrictions, replicas)
        finally:
            directory.close()
            if started:
                stop_controller()
