"""Arena planning: give every storage an offset so that storages alive at the same time never
overlap, while storages whose lifetimes are disjoint reuse the same bytes.

Lifetimes are inclusive launch-index intervals [first, last]. Placement is greedy by size, largest
first, each at the lowest aligned offset clear of every already-placed storage it is alive with.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpu_runtime.program import BufferRef, Program

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


def chunked(program: Program, chunks: list[tuple[int, int]]) -> Program:
    """`program` re-planned so that any chunk (launch range [start, end)) can be re-run from its
    start after it ran partly: a storage read anywhere in a chunk stays intact until the chunk's
    end, so no later launch of the same chunk can have overwritten it. Weights keep their region;
    inputs and outputs stay pinned as the importer planned them."""
    n = len(program.launches)
    chunk_end = [0] * n
    for start, end in chunks:
        if not 0 <= start < end <= n:
            raise ValueError(f"chunk [{start}, {end}) outside the program's {n} launches")
        for i in range(start, end):
            chunk_end[i] = end - 1
    if sorted(chunks) != chunks or sum(e - s for s, e in chunks) != n or chunks[0][0] != 0 \
            or any(a[1] != b[0] for a, b in zip(chunks, chunks[1:])):
        raise ValueError("chunks must cover the launches in order without gaps or overlaps")
    owner = [b.alias_of if b.alias_of is not None else i for i, b in enumerate(program.buffers)]
    # A storage's buffers may view parts of it (element offsets): plan the span they cover.
    base: dict[int, int] = {}
    end: dict[int, int] = {}
    for i, b in enumerate(program.buffers):
        s = owner[i]
        base[s] = min(base.get(s, b.offset), b.offset)
        end[s] = max(end.get(s, b.offset + b.nbytes), b.offset + b.nbytes)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, launch in enumerate(program.launches):
        for a in launch.args:
            if isinstance(a, BufferRef):
                s = owner[a.index]
                first.setdefault(s, i)
                last[s] = i
    pinned = {owner[i] for i in (*program.inputs.values(), *program.outputs.values())}
    lifetimes = []
    for s in sorted(set(first) | pinned):
        spec = program.buffers[s]
        if spec.role == "weight":
            continue
        lo = -1 if spec.role == "input" else first.get(s, n)
        hi = n if s in pinned else chunk_end[last[s]]
        lifetimes.append(Lifetime(s, end[s] - base[s], lo, hi))
    offsets, total = plan(lifetimes)
    buffers = [b if b.role == "weight" else
               replace(b, offset=offsets.get(owner[i], 0) + b.offset - base[owner[i]])
               for i, b in enumerate(program.buffers)]
    return replace(program, buffers=buffers, arena_bytes=total, restore_window=0)
