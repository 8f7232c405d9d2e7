"""CPU time by party, read from /proc: who used the cores during a measurement window.

On a machine where the load generator, the server and other tenants share cores, a throughput
figure means little without it: the bench reports the cores used by the server (its process and
every descendant: front ends, preprocessing workers, vGPU workers), by the load processes, and by
everything else on the machine. Linux only; elsewhere every figure is None.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PROC = Path("/proc")


def _ticks() -> float:
    return float(os.sysconf("SC_CLK_TCK"))


def stat_fields(text: str) -> list[str]:
    """A /proc stat file's fields after the name (in parentheses, which may hold spaces): the
    state first, so utime is [11], stime [12], the waited-for children's cutime and cstime [13:15]."""
    return text.rsplit(")", 1)[1].split()


def named_cpu_s(stat: Path) -> tuple[str, float]:
    """(name, user + system seconds) from a process's or a thread's /proc stat file."""
    text = stat.read_text()
    fields = stat_fields(text)
    return text[text.index("(") + 1 : text.rindex(")")], (int(fields[11]) + int(fields[12])) / _ticks()


def process_cpu_s(pid: int, reaped: bool = False) -> float:
    """User + system seconds of one live process, all its threads (0 when it is gone); with
    `reaped`, also those of its children that ended and that it waited for."""
    try:
        fields = stat_fields((PROC / str(pid) / "stat").read_text())
        return sum(int(v) for v in fields[11:15 if reaped else 13]) / _ticks()
    except (OSError, IndexError, ValueError):
        return 0.0


def descendants(pid: int) -> list[int]:
    """`pid` and every live process below it."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                ppid = int(stat_fields((entry / "stat").read_text())[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def machine_busy_s() -> float:
    """Non-idle CPU seconds of the whole machine since boot (all cores)."""
    values = [int(v) for v in (PROC / "stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / _ticks()


class CpuMeter:
    """Cores used per party between `start()` and `stop()`: {party: cores, "other": cores,
    "machine": cores}, parties given as root pids (their descendants are included)."""

    def __init__(self, parties: dict[str, list[int]]):
        self.parties = parties
        self.available = PROC.joinpath("stat").is_file()

    def _sample(self) -> tuple[float, dict[str, float], float]:
        # (a process that ends during the window keeps counting through its parent, which waited
        # for it: without that, a server whose worker processes restarted came out at negative cores)
        used = {name: sum(process_cpu_s(p, reaped=True) for root in roots for p in descendants(root))
                for name, roots in self.parties.items()}  # fmt: skip
        return time.monotonic(), used, machine_busy_s()

    def start(self) -> None:
        self._start = self._sample() if self.available else None

    def stop(self) -> dict[str, float | None]:
        if self._start is None:
            return dict.fromkeys([*self.parties, "other", "machine"])
        t0, used0, busy0 = self._start
        t1, used1, busy1 = self._sample()
        wall = max(t1 - t0, 1e-9)
        out = {name: round((used1[name] - used0[name]) / wall, 3) for name in self.parties}
        machine = round((busy1 - busy0) / wall, 3)
        out["other"] = round(max(0.0, machine - sum(out.values())), 3)
        out["machine"] = machine
        return out
