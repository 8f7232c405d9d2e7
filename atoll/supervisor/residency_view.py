"""The dispatcher's picture of what each vGPU's weight pool holds, for the batcher's
`switch_time` (batching/preba.py, docs/residency.md).

Each worker decides residency itself (`gpu_runtime.residency.manager`); this view replays the same
decisions (`Holdings`: the same policy and pool places) on the batches the dispatcher sends to each
vGPU and their completions, starting from what each load reported. It sees a batch as busy from its
dispatch to its answer, a little longer than the worker does, so it can differ from the worker for a
moment after a batch ends; it only steers the batcher, never correctness.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpu_runtime.residency.holdings import Holdings
from gpu_runtime.residency.settings import ResidencySettings


class ResidencyView:
    def __init__(self, settings: ResidencySettings, vgpus: Iterable[str]):
        self._settings = settings
        self._holdings = {v: Holdings(settings.budget_bytes, settings.pinned, settings.evict_real_time)
                          for v in vgpus}  # fmt: skip
        self._models: dict[str, tuple[int, float]] = {}  # model -> (bytes of pool, switch seconds)

    def add(self, model: str, described: dict[str, dict]) -> None:
        """A model loaded; `described`: what each vGPU's worker said of it (its "residency")."""
        for vgpu, description in described.items():
            r = description.get("residency")
            if r is None or vgpu not in self._holdings:
                continue
            # a virtual pool holds arenas too: the model takes its footprint there
            footprint = r.get("footprint", r["weight_bytes"])
            self._models[model] = (footprint, self._settings.switch_s(r["weight_bytes"], r["groups"]))
            if r["resident"]:
                self._holdings[vgpu].load(model, footprint)

    def remove(self, model: str) -> None:
        self._models.pop(model, None)
        for holdings in self._holdings.values():
            holdings.forget(model)

    def switch_time(self, model: str, vgpu: str) -> float:
        """`preba.SwitchTime`: 0 when `vgpu` holds the model (or it is not under residency)."""
        known = self._models.get(model)
        return 0.0 if known is None or model in self._holdings[vgpu] else known[1]

    def dispatched(self, model: str, vgpu: str, real_time: bool) -> None:
        known = self._models.get(model)
        if known is not None:
            self._holdings[vgpu].take(model, known[0], real_time)

    def completed(self, model: str, vgpu: str) -> None:
        if model in self._models:
            self._holdings[vgpu].end(model)
