"""PipeSwitch's pipelined model transmission: which launches form a layer group.

Weights move group by group; a group's launches start once its bytes (and every earlier group's)
have arrived and the previous group has run. Each transfer costs a fixed `overhead_s` (a copy's
launch and its event) plus bytes / bandwidth, so one group per launch pays the overhead too often
and one group for the whole model runs nothing until everything arrived. PipeSwitch searches the
groupings with pruning; the objective is exactly solvable by dynamic programming over the group
boundaries (O(K n^2), n = launches that bring new weights, vectorised over the last boundary):

    arrive(k, j) = k * overhead_s + bytes[0:j] / bandwidth         (k groups cover launches [0, j))
    end(k, j)    = min_i max(end(k-1, i), arrive(k, j)) + exec[i:j]

A boundary only ever sits before a launch that brings weights: moving one across a launch that
needs none can only let that launch start earlier.
"""

from __future__ import annotations

import numpy as np

MAX_GROUPS = 64  # more groups than this never paid off in measurement: overheads dominate


def plan_groups(weight_bytes: list[int], exec_s: list[float], bandwidth: float, overhead_s: float,
                max_groups: int = MAX_GROUPS) -> list[int]:
    """The launch index each group starts at (the first is 0), minimising when the last launch ends
    under the model above; `weight_bytes[i]` are the bytes launch i is first to read."""
    n = len(weight_bytes)
    if n == 0:
        return [0]
    # candidate boundaries: 0, every later launch that brings weights, and the end
    cuts = [0] + [i for i in range(1, n) if weight_bytes[i] > 0] + [n]
    pb = np.concatenate(([0.0], np.cumsum(weight_bytes, dtype=np.float64)))[cuts]
    pe = np.concatenate(([0.0], np.cumsum(exec_s, dtype=np.float64)))[cuts]
    m = len(cuts) - 1  # units between cuts
    k_max = min(m, max_groups)
    inf = np.inf
    end = np.full((k_max + 1, m + 1), inf)
    arg = np.zeros((k_max + 1, m + 1), np.int64)
    end[0, 0] = 0.0
    for k in range(1, k_max + 1):
        for j in range(k, m + 1):
            arrive = k * overhead_s + pb[j] / bandwidth
            start = np.maximum(end[k - 1, :j], arrive)
            total = start + (pe[j] - pe[:j])
            i = int(np.argmin(total))
            end[k, j], arg[k, j] = total[i], i
    k = int(np.argmin(end[1:, m])) + 1
    starts, j = [], m
    while k > 0:
        i = int(arg[k, j])
        starts.append(cuts[i])
        j, k = i, k - 1
    return starts[::-1]


def pipelined_end_s(starts: list[int], weight_bytes: list[int], exec_s: list[float], bandwidth: float,
                    overhead_s: float) -> float:
    """When the last launch ends under grouping `starts` (the model `plan_groups` minimises)."""
    bounds = [*starts, len(weight_bytes)]
    arrived = ended = 0.0
    for a, b in zip(bounds, bounds[1:]):
        arrived += overhead_s + sum(weight_bytes[a:b]) / bandwidth
        ended = max(ended, arrived) + sum(exec_s[a:b])
    return ended
