"""Where the cluster's Atoll nodes are: the interface between the runtime that starts them (Ray) and
the endpoint that forwards to them, so the endpoint runs the same over Ray or a fixed list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class NodeAddress:
    name: str  # a stable node name
    http: str  # "host:port" of the node's atoll serve HTTP
    grpc: str  # "host:port" of its gRPC, "" when off
    metrics: str  # "host:port" of its Prometheus port, "" when off
    local: str = ""  # its HTTP port's twin on its host (atoll.http.local_socket), "" when none


class Directory(Protocol):
    def nodes(self) -> list[NodeAddress]:
        """The live, ready nodes now (cheap: called often)."""
        ...


class StaticDirectory:
    """A fixed list of nodes (tests, and `--node host:port` without Ray)."""

    def __init__(self, nodes: list[NodeAddress]):
        self._nodes = list(nodes)

    def nodes(self) -> list[NodeAddress]:
        return list(self._nodes)
