"""The knee rule: the largest batch before tail latency grows faster than throughput.

Over profiled batch sizes b_1 < b_2 < ... < b_n with tail latencies l_i (throughput t_i = b_i / l_i),
step i -> i+1 has latency growth l_{i+1} / l_i and throughput gain t_{i+1} / t_i. Batch_knee is b_j
for the first step j -> j+1 whose latency growth exceeds its throughput gain (equivalently
(l_{j+1} / l_j)^2 > b_{j+1} / b_j: for doubling sizes, latency grew by more than sqrt(2)); b_n when
no step does. Time_knee is l_j, the tail latency at Batch_knee.
"""

from __future__ import annotations

from collections.abc import Mapping


def knee(latency: Mapping[int, float]) -> tuple[int, float]:
    """(Batch_knee, Time_knee) from tail latency per batch size (any unit; Time_knee in that unit)."""
    if not latency:
        raise ValueError("knee needs at least one profiled batch size")
    sizes = sorted(latency)
    if sizes[0] < 1 or any(latency[b] <= 0 for b in sizes):
        raise ValueError("batch sizes must be >= 1 and latencies > 0")
    for small, large in zip(sizes, sizes[1:]):
        latency_growth = latency[large] / latency[small]
        throughput_gain = (large / latency[large]) / (small / latency[small])
        # a tie within rounding is not "faster"
        if latency_growth > throughput_gain * (1 + 1e-9):
            return small, latency[small]
    return sizes[-1], latency[sizes[-1]]
