"""Expected batch service times for batch placement, learned from the batches actually run.

The batcher places a batch on the vGPU with the earliest expected completion, so it needs an
estimate before any profile exists. We keep an exponentially weighted mean of seconds per batch for
each (model, vGPU kind, batch size) and, for sizes not seen yet, scale the nearest seen size linearly
in the batch size (an upper bound for batched DNN inference, so placement errs towards spreading).
"""

from __future__ import annotations

from collections import defaultdict

ALPHA = 0.2  # weight of the newest observation
PRIOR_SECONDS = 0.010  # before anything is measured


class LatencyModel:
    def __init__(self, alpha: float = ALPHA, prior_seconds: float = PRIOR_SECONDS):
        self.alpha = alpha
        self.prior = prior_seconds
        self._mean: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)

    def observe(self, model: str, kind: str, batch: int, seconds: float) -> None:
        table = self._mean[(model, kind)]
        old = table.get(batch)
        table[batch] = seconds if old is None else (1 - self.alpha) * old + self.alpha * seconds

    def __call__(self, model: str, batch: int, length: float, kind: str) -> float:
        table = self._mean.get((model, kind))
        if not table:
            return self.prior * batch
        if batch in table:
            return table[batch]
        nearest = min(table, key=lambda b: abs(b - batch))
        return table[nearest] * batch / nearest
