"""Where a server's CPU goes, per request and per stage, from every thread's CPU clock in /proc.

Atoll names the OS threads of its data plane by what they do (`gpu_runtime.thread_names`), so a
window's CPU time, summed by name, is an account by stage that costs the server nothing: the
front ends' event loops (HTTP/gRPC edge, admission, answers), their preprocessing lanes (which
also run the models a front end runs itself, `atoll/front_end/colocated.py`), the
supervisor's loop (dispatching and batching), the hops to and from the vGPU workers (their reply
threads and the supervisor's sender and monitor threads), and the
executor (its engine threads and onnxruntime's pool). Any other thread counts to its process by
name, so nothing is hidden. Linux only; elsewhere `available` is False.
"""

from __future__ import annotations

from dataclasses import dataclass

from atoll.bench.cpustat import PROC, descendants, named_cpu_s

# thread-name prefix -> stage, first match wins (names: atoll-fe0, lane-be0, atoll-super, ...)
STAGES = (
    ("atoll-fe", "front end: edge, admission, answers"),
    ("lane-", "lanes: preprocessing, colocated runs"),
    ("atoll-super", "supervisor: dispatch, batching"),
    ("send-", "hop: supervisor to vGPU worker"),
    ("atoll-w-", "hop: into the vGPU worker"),
    ("hop-", "hop: vGPU worker back"),  # its reply thread, the supervisor's monitor
    ("exec-", "executor"),
    ("atoll-py", "Python models: hop, instances"),  # atoll/pybackend
)
ORDER = [stage for _, stage in STAGES]


def stage_of(thread: str, process: str) -> str:
    """The stage of a thread by its name; any other thread counts to its process (which is how
    a server that names no threads, like Triton or the plain baseline, is accounted)."""
    return next((stage for prefix, stage in STAGES if thread.startswith(prefix)), f"other: {process}")


def threads_cpu(root: int) -> dict[tuple[int, int], tuple[str, str, float]]:
    """{(pid, tid): (process name, thread name, CPU seconds)} for `root` and its descendants."""
    out = {}
    for pid in descendants(root):
        try:
            process, _ = named_cpu_s(PROC / str(pid) / "stat")
            for task in (PROC / str(pid) / "task").iterdir():
                name, seconds = named_cpu_s(task / "stat")
                out[(pid, int(task.name))] = (process, name, seconds)
        except (OSError, ValueError):  # gone meanwhile
            continue
    return out


@dataclass
class Account:
    """CPU-ms per request by stage and by process over one window."""

    requests: int
    stages: dict[str, float]
    processes: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.stages.values())

    def to_json(self) -> dict:
        return {"requests": self.requests, "total_cpu_ms_per_request": round(self.total, 3),
                "stages_cpu_ms_per_request": {k: round(v, 3) for k, v in self.stages.items()},
                "processes_cpu_ms_per_request": {k: round(v, 3) for k, v in self.processes.items()}}  # fmt: skip

    def table(self) -> str:
        lines = [f"    {'stage':40s} {'CPU-ms/req':>10s} {'share':>6s}"]
        for stage, ms in self.stages.items():
            lines.append(f"    {stage:40s} {ms:10.3f} {ms / max(self.total, 1e-9):6.1%}")
        lines.append(f"    {'total':40s} {self.total:10.3f}")
        return "\n".join(lines)


class ThreadMeter:
    """`start()` and `stop()` around a window, then `account(requests)`: the Account of the server
    under `root` in that window."""

    def __init__(self, root: int):
        self.root = root
        self.available = PROC.joinpath(str(root), "task").is_dir()

    def start(self) -> None:
        self._before = threads_cpu(self.root) if self.available else {}

    def stop(self) -> None:
        self._after = threads_cpu(self.root) if self.available else {}

    def account(self, requests: int) -> Account | None:
        if not self.available or not requests:
            return None
        stages = dict.fromkeys(ORDER, 0.0)
        processes: dict[str, float] = {}
        per = 1000.0 / max(requests, 1)
        for key, (process, thread, seconds) in self._after.items():
            spent = (seconds - self._before.get(key, ("", "", 0.0))[2]) * per
            if spent <= 0:
                continue
            stage = stage_of(thread, process)
            stages[stage] = stages.get(stage, 0.0) + spent
            processes[process] = processes.get(process, 0.0) + spent
        return Account(requests, stages, dict(sorted(processes.items(), key=lambda kv: -kv[1])))
