"""Who leaves the vGPU when a model must come in: pure policy, no clock, no memory.

A model may be evicted only when it is idle (no batch running or admitted on the vGPU, none waiting
for it: `waiting`, the worker's own queue or, in the dispatcher's view, the batcher's), not pinned
resident by config, and not a real-time model unless configured. Among those, the least recently
used go first, just as many as the incoming model needs (`fits`). A model with work waiting is never
the victim, so two models taking turns each keep their place while either has work queued: a switch
evicts only what nobody is asking for, which is what keeps switching from thrashing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable


class ResidencySet:
    def __init__(self, pinned: Iterable[str] = (), evict_real_time: bool = False):
        self.pinned = set(pinned)
        self.evict_real_time = evict_real_time
        self.real_time: set[str] = set()  # models that ran real-time work
        self._resident: OrderedDict[str, None] = OrderedDict()  # least recently used first
        self._busy: dict[str, int] = {}

    def __contains__(self, model: str) -> bool:
        return model in self._resident

    def resident(self) -> list[str]:
        return list(self._resident)

    def add(self, model: str) -> None:
        """`model` is resident, most recently used."""
        self._resident[model] = None
        self._resident.move_to_end(model)

    def remove(self, model: str) -> None:
        self._resident.pop(model, None)
        self._busy.pop(model, None)

    def begin(self, model: str, real_time: bool = False) -> None:
        """A batch of `model` was admitted: it is used now, and busy until `end`."""
        self._busy[model] = self._busy.get(model, 0) + 1
        if model in self._resident:
            self._resident.move_to_end(model)
        if real_time:
            self.real_time.add(model)

    def end(self, model: str) -> None:
        left = self._busy.get(model, 0) - 1
        if left > 0:
            self._busy[model] = left
        else:
            self._busy.pop(model, None)

    def _pinned(self, model: str) -> bool:
        """The server names a served version `name/version`; a pinned entry names a model (all its
        versions) or one version."""
        return model in self.pinned or model.partition("/")[0] in self.pinned

    def busy(self, model: str) -> bool:
        return model in self._busy

    def evictable(self, model: str, waiting: Callable[[str], bool]) -> bool:
        return not (model in self._busy or self._pinned(model) or waiting(model)
                    or (model in self.real_time and not self.evict_real_time))

    def victims(self, incoming: str, fits: Callable[[set[str]], bool],
                waiting: Callable[[str], bool] = lambda m: False) -> list[str] | None:
        """The fewest least-recently-used evictable models whose leaving makes `fits` true, or
        None when even all of them would not do (the incoming model waits for work to end)."""
        chosen: list[str] = []
        if fits(set()):
            return chosen
        for model in self._resident:
            if model != incoming and self.evictable(model, waiting):
                chosen.append(model)
                if fits(set(chosen)):
                    return chosen
        return None
