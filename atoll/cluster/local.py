"""A Ray cluster of N raylets on this machine, each offering `atoll_node`: for demos, the bench's
`--cluster N` and the multi-node tests (`ray.cluster_utils.Cluster`, Ray's own test harness)."""

from __future__ import annotations

import os

from atoll.cluster.nodes import RESOURCE

RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0"}  # set before the raylets start (they inherit it): no usage report
NODE_ARGS = {"num_cpus": 1, "resources": {RESOURCE: 1}, "object_store_memory": 80 * 2**20}


def local_cluster(nodes: int):
    """A started `ray.cluster_utils.Cluster` of `nodes` raylets (the head among them), not connected."""
    from ray.cluster_utils import Cluster  # optional: Ray, the cluster extra

    os.environ.update(RAY_ENV)

    cluster = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(**NODE_ARGS)
    return cluster


def stop_local_cluster(cluster) -> None:
    """End `cluster`'s processes at once (SIGKILL), once nothing of Atoll runs on them: started
    shielded from stop signals (`runtime.connected`), each would only make Ray's graceful stop wait a
    second for its SIGTERM; a raylet's workers end with it. So do its agents (dashboard, runtime
    env), which Ray does not track: left to themselves, each found its raylet killed, then tried for
    60 s to report that to the GCS, dead too, before it exited."""
    import psutil  # Ray's own dependency, with it

    nodes = [*cluster.worker_nodes, cluster.head_node]
    raylets = [info.process.pid for node in nodes for info in node.all_processes.get("raylet", [])]
    agents = []
    for pid in raylets:
        try:
            agents += psutil.Process(pid).children(recursive=True)
        except psutil.NoSuchProcess:  # ended already
            continue
    for node in nodes:
        cluster.remove_node(node, allow_graceful=False)
    cluster.shutdown()  # nothing left to remove: Ray's record of the cluster's address is cleared
    for agent in agents:
        try:
            agent.kill()
        except psutil.NoSuchProcess:
            continue
