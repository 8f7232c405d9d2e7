"""One real Ray cluster for the cluster tests: two raylets on this machine, each offering
`atoll_node`, connected in namespace "atoll"; shut down (every Ray process) after the session."""

from __future__ import annotations

import pytest

from atoll.cluster.local import local_cluster
from atoll.cluster.membership import NAMESPACE


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="ray is not installed (the cluster extra)")

    cluster = local_cluster(2)
    try:
        ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
