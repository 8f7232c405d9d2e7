"""The rules that turn a profile into Batch_max and Time_knee, one per kind of device.

`knee` (GPUs): over profiled batch sizes b_1 < b_2 < ... < b_n with tail latencies l_i (throughput
t_i = b_i / l_i), step i -> i+1 has latency growth l_{i+1} / l_i and throughput gain t_{i+1} / t_i.
Batch_knee is b_j for the first step j -> j+1 whose latency growth exceeds its throughput gain
(equivalently (l_{j+1} / l_j)^2 > b_{j+1} / b_j: for doubling sizes, latency grew by more than
sqrt(2)); b_n when no step does. Time_knee is l_j, the tail latency at Batch_knee.

`cost_floor` (CPUs, where latency grows with the batch from the start): Batch_max is the smallest
b_i whose per-input CPU cost c_i is at most (1 + tolerance) * min(c); Time_knee is l_i.
"""

from __future__ import annotations

from collections.abc import Mapping

KNEE = "latency-knee"
COST_FLOOR = "cost-floor"
RULES = (KNEE, COST_FLOOR)
COST_TOLERANCE = 0.05  # a batch within 5 % of the least per-input cost has stopped paying


def knee(latency: Mapping[int, float]) -> tuple[int, float]:
    """(Batch_knee, Time_knee) from tail latency per batch size (any unit; Time_knee in that unit)."""
    sizes = _checked_sizes(latency, "latencies")
    for small, large in zip(sizes, sizes[1:]):
        latency_growth = latency[large] / latency[small]
        throughput_gain = (large / latency[large]) / (small / latency[small])
        # a tie within rounding is not "faster"
        if latency_growth > throughput_gain * (1 + 1e-9):
            return small, latency[small]
    return sizes[-1], latency[sizes[-1]]


def cost_floor(latency: Mapping[int, float], cost: Mapping[int, float],
               tolerance: float = COST_TOLERANCE) -> tuple[int, float]:
    """(Batch_max, Time_knee): the smallest batch whose per-input cost (`cost`, any unit) is within
    `tolerance` of the least, and the tail latency there (`latency`'s unit)."""
    sizes = _checked_sizes(cost, "costs")
    if sorted(latency) != sizes:
        raise ValueError("latency and cost must cover the same batch sizes")
    least = min(cost.values())
    batch = next(b for b in sizes if cost[b] <= least * (1 + tolerance))
    return batch, latency[batch]


def batch_max(rule: str, latency: Mapping[int, float],
              cost: Mapping[int, float] | None = None) -> tuple[int, float]:
    """(Batch_max, Time_knee) by the named rule; `cost_floor` needs the per-input costs."""
    if rule == KNEE:
        return knee(latency)
    if rule == COST_FLOOR:
        if cost is None:
            raise ValueError(f"the {COST_FLOOR} rule needs per-input costs")
        return cost_floor(latency, cost)
    raise ValueError(f"unknown Batch_max rule {rule!r}; choose from {', '.join(RULES)}")


def _checked_sizes(values: Mapping[int, float], what: str) -> list[int]:
    if not values:
        raise ValueError("a rule needs at least one profiled batch size")
    sizes = sorted(values)
    if sizes[0] < 1 or any(values[b] <= 0 for b in sizes):
        raise ValueError(f"batch sizes must be >= 1 and {what} > 0")
    return sizes
