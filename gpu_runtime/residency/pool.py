"""The one pre-allocated weight pool of a vGPU: models' weight images at offsets inside it, so a
switch allocates nothing (PipeSwitch's unified memory management). First fit over the free ranges,
a model's previous place preferred (its programs' views then stay as they are)."""

from __future__ import annotations

ALIGN = 256  # CUDA's allocation alignment: every weight image starts on one


def aligned(nbytes: int) -> int:
    return -(-max(nbytes, 1) // ALIGN) * ALIGN


class WeightPool:
    """Offsets in a pool of `nbytes`; `place` never moves another model."""

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self._placed: dict[str, tuple[int, int]] = {}  # model -> (offset, aligned size)

    def offset(self, model: str) -> int | None:
        placed = self._placed.get(model)
        return placed[0] if placed else None

    def place(self, model: str, nbytes: int, prefer: int | None = None) -> int | None:
        """An offset for `nbytes` of `model` (`prefer` if that range is free), or None when no
        free range is large enough."""
        size = aligned(nbytes)
        holes = self.free_ranges()
        if prefer is not None and any(a <= prefer and prefer + size <= b for a, b in holes):
            at = prefer
        else:
            at = next((a for a, b in holes if b - a >= size), None)
            if at is None:
                return None
        self._placed[model] = (at, size)
        return at

    def fits(self, nbytes: int, leaving: set[str] = frozenset()) -> bool:
        """Whether `nbytes` would find a range once the models in `leaving` are gone."""
        size = aligned(nbytes)
        return any(b - a >= size for a, b in self.free_ranges(leaving))

    def free(self, model: str) -> None:
        self._placed.pop(model, None)

    def free_ranges(self, leaving: set[str] = frozenset()) -> list[tuple[int, int]]:
        taken = sorted(v for m, v in self._placed.items() if m not in leaving)
        out, at = [], 0
        for offset, size in taken:
            if offset > at:
                out.append((at, offset))
            at = max(at, offset + size)
        if at < self.nbytes:
            out.append((at, self.nbytes))
        return out
