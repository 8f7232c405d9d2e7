"""How many kernels of a program may be in flight and still be re-run safely after a reset.

Kernels are idempotent one by one, but the arena planner lets dead temporaries share bytes. After a
reset the task restarts at its last *known* completed kernel `s`; kernels s..s+c-1 may have run
already. Re-running kernel i is only correct if no later kernel in that window overwrote the bytes
i reads. So `c` must not exceed, for every launch i, the distance to the first later launch whose
writes overlap i's reads. The scheduler caps each task's outstanding kernels at this window.
"""

from __future__ import annotations

from gpu_runtime.program import BufferRef, Program

# Looking further than this is pointless: nobody keeps more kernels outstanding.
MAX_WINDOW = 64


class NotRestartable(ValueError):
    """A launch's output shares bytes with one of its inputs, so re-running it reads its own result.
    (A kernel that updates a buffer in place cannot be seen from the launch: its output is also an
    argument. The importer must not emit one, ARCHITECTURE §3.)"""


def _ranges(program: Program, indices) -> list[tuple[int, int]]:
    out = []
    for i in indices:
        b = program.buffers[i]
        out.append((b.offset, b.offset + b.nbytes))
    return out


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    return any(s0 < e1 and s1 < e0 for s0, e0 in a for s1, e1 in b)


def rerun_window(program: Program, limit: int = MAX_WINDOW) -> int:
    reads, writes = [], []
    for launch in program.launches:
        written = set(launch.writes)
        # Weights are constants nobody writes, whatever offset the planner gave them.
        read = {a.index for a in launch.args
                if isinstance(a, BufferRef) and program.buffers[a.index].role != "weight"} - written
        reads.append(_ranges(program, sorted(read)))
        writes.append(_ranges(program, sorted(written)))
    window = limit
    n = len(program.launches)
    for i in range(n):
        if _overlap(reads[i], writes[i]):
            raise NotRestartable(f"{program.model}: launch {i} ({program.launches[i].kernel.name}) "
                                 "writes bytes it reads")
        for j in range(i + 1, min(n, i + window)):
            if _overlap(writes[j], reads[i]):
                window = j - i
                break
    return max(1, window)
