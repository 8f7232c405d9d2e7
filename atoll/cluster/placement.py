"""Which nodes should hold a model loaded through the endpoint: every live node by default, or
`replicas` of them (the load request's `replicas` parameter, else the endpoint's per-model default).
Nodes holding it already keep it; the rest are the nodes holding the fewest models, by name on a
tie, so that models loaded one after another spread over the nodes. Pure: the endpoint asks it on
every load and on every refresh (a node that joins later gets what is placed on it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

REPLICAS = "replicas"  # the load parameter the endpoint reads and does not pass on


def targets(live: Sequence[str], holding: set[str], replicas: int | None,
            models_held: Mapping[str, int]) -> list[str]:  # fmt: skip
    """The live nodes (names) that should hold the model: all with `replicas` None, else that many
    (or every live node where fewer live), those in `holding` first, then the least loaded by
    `models_held` (models each node holds)."""
    if replicas is None or replicas >= len(live):
        return list(live)
    kept = [name for name in live if name in holding][:replicas]
    others = sorted((name for name in live if name not in holding), key=lambda n: (models_held.get(n, 0), n))
    return kept + others[: replicas - len(kept)]


def replicas_of(parameters: dict, default: int | None) -> int | None:
    """The `replicas` load parameter (removed from `parameters`: the nodes do not know it), else
    `default`; ValueError for anything but a positive integer."""
    value = parameters.pop(REPLICAS, default)
    if isinstance(value, str) and value.isdigit():  # gRPC string parameters, --set style values
        value = int(value)
    if value is not None and (type(value) is not int or value < 1):
        raise ValueError(f"load parameter {REPLICAS!r} must be a positive integer, got {value!r}")
    return value
