"""What one vGPU's pool holds and where, with no memory behind it: the eviction policy
(`policy.ResidencySet`) and the places (`pool.WeightPool`) together. The worker's `manager` acts on
its answers (rebinding views, copying); the dispatcher replays the same answers on the batches it
sends, so the batcher sees what each vGPU holds (atoll/supervisor/residency_view.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpu_runtime.residency.policy import ResidencySet
from gpu_runtime.residency.pool import WeightPool


class Holdings:
    def __init__(self, nbytes: int, pinned: Iterable[str] = (), evict_real_time: bool = False):
        self.places = WeightPool(nbytes)
        self.policy = ResidencySet(pinned, evict_real_time)
        self._last: dict[str, int] = {}  # model -> its last place (a switch back prefers it)

    def __contains__(self, model: str) -> bool:
        return model in self.policy

    def load(self, model: str, nbytes: int) -> int | None:
        """A model being loaded: its place if the pool has room without evicting, else None."""
        at = self.places.place(model, nbytes)
        if at is not None:
            self._last[model] = at
            self.policy.add(model)
        return at

    def take(self, model: str, nbytes: int, real_time: bool,
             waiting: Callable[[str], bool] = lambda m: False) -> tuple[list[str], int | None] | None:
        """A batch of `model` begins: ([], None) if it is resident; (the models evicted for it, its
        new place) if it is switched in; None if it must wait for work to end."""
        if model in self.policy:
            self.policy.begin(model, real_time)
            return [], None
        victims = self.policy.victims(model, lambda leaving: self.places.fits(nbytes, leaving), waiting)
        if victims is None:
            return None
        for victim in victims:
            self.places.free(victim)
            self.policy.remove(victim)
        at = self.places.place(model, nbytes, prefer=self._last.get(model))
        self._last[model] = at
        self.policy.add(model)
        self.policy.begin(model, real_time)
        return victims, at

    def end(self, model: str) -> None:
        self.policy.end(model)

    def forget(self, model: str) -> None:
        self.places.free(model)
        self.policy.remove(model)
        self._last.pop(model, None)

    def resident(self) -> list[str]:
        return self.policy.resident()
