"""Arena planning: give every storage an offset so that storages alive at the same time never
overlap, while storages whose lifetimes are disjoint reuse the same bytes.

Lifetimes are inclusive launch-index intervals [first, last]. Placement is greedy by size, largest
first, each at the lowest aligned offset clear of every already-placed storage it is alive with.
"""

from __future__ import annotations

from dataclasses import dataclass

ALIGN = 256


@dataclass(frozen=True)
class Lifetime:
    key: int
    nbytes: int
    first: int
    last: int

    def overlaps(self, other: "Lifetime") -> bool:
        return self.first <= other.last and other.first <= self.last


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan(lifetimes: list[Lifetime]) -> tuple[dict[int, int], int]:
    """Returns (offset by key, total bytes)."""
    placed: list[tuple[int, int, Lifetime]] = []  # (offset, end, lifetime)
    offsets: dict[int, int] = {}
    total = 0
    for lt in sorted(lifetimes, key=lambda t: (-t.nbytes, t.first, t.key)):
        size = _align(max(lt.nbytes, 1))
        busy = sorted((o, e) for o, e, other in placed if other.overlaps(lt))
        offset = 0
        for start, end in busy:
            if offset + size <= start:
                break
            offset = max(offset, end)
        offsets[lt.key] = offset
        placed.append((offset, offset + size, lt))
        total = max(total, offset + size)
    return offsets, total


def pack(sizes: dict[int, int]) -> tuple[dict[int, int], int]:
    """Back-to-back placement (for weights, which are all alive all the time)."""
    offsets, total = {}, 0
    for key, n in sizes.items():
        offsets[key] = total
        total += _align(max(n, 1))
    return offsets, total
