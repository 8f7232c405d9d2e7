"""Measured WCETs of the stages a real-time row crosses, per model and vGPU kind, and how the
admission test reads them: the data and its JSON form, no clock, no files.

What is measured (`atoll rt profile`, `atoll bench rt`: atoll/bench/rt_wcet.py) and why:
- `execution_s[b]`: a real-time batch of b rows alone on the vGPU, arrival to answer through the
  scheduler, the largest of `runs` runs times `margin`;
- `longest_kernel_s`: the model's longest launch, times `margin` (what a flushed best-effort
  stream still finishes on a CPU vGPU: a floor of `blocking_s` there, see below);
- `preprocess_s`: one row's preprocessing on its backend (0 for ready tensors);
- the vGPU's `blocking_s`: what saturating best-effort work adds to a lone real-time row that
  preempts it, the largest over the probes of (response - the model's median response alone),
  times the margin. On a CPU vGPU the RT stream takes the core from best-effort threads at once
  (SCHED_FIFO against niced threads), so what is left is the interpreter lock and the cache held
  by the best-effort kernels in flight, usually far less than their length; on a GPU the guard's
  exit. `atoll bench rt` takes no less than the best-effort models' longest kernel on a CPU vGPU:
  its probes, a few hundred one at a time, meet the kernels' worst phase less often than a long
  run's critical instants do.
  A probe's excess may hold a platform stall (below) as well: counted in both terms, the safe
  side (a BE kernel holding the core and a stall may come together);
- the platform's `stall_s`: the largest lateness of a stall probe (a thread one SCHED_FIFO level
  above the real-time lanes asking to wake every few ms) over the whole measurement, times the
  margin: the core or the interpreter lock taken from a ready real-time thread by anything but
  real-time work (the hypervisor, the kernel's real-time throttling, another process's
  higher-priority threads, a best-effort kernel holding the lock); a term of its own in the
  analysis. Profiles measured while the probe ran at the lanes' level (the shipped rt_cpu.json)
  hold the lanes' own runs in it as well: larger, still safe;
- `front_end_s`: the server's hops outside the dispatcher, per request: its front end receiving
  the request and handing it to the dispatcher, then answering it once done (over loopback), the
  largest of the requests timed, times the margin (0: not measured, the bound starts at the
  dispatcher).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelWcet:
    execution_s: dict[int, float]  # batch size -> WCET (margin included)
    observed_max_s: dict[int, float]  # batch size -> the largest run measured
    longest_kernel_s: float  # margin included
    preprocess_s: float = 0.0
    runs: int = 0

    def per_row_s(self) -> float:
        """What one real-time row costs the vGPU at most, however the rows are batched (among the
        profiled batch sizes)."""
        return max(w / b for b, w in self.execution_s.items())


@dataclass(frozen=True)
class WcetProfile:
    kind: str  # vGPU kind
    margin: float  # measured maxima are multiplied by this
    blocking_s: float  # the most best-effort work delays a real-time row (margin included)
    models: dict[str, ModelWcet] = field(default_factory=dict)
    source: str = ""
    stall_s: float = 0.0  # the platform's longest stall (margin included)
    front_end_s: float = 0.0  # the front end's hops per request (margin included)

    def to_json(self) -> dict:
        return {
            "kind": self.kind, "margin": self.margin, "blocking_ms": self.blocking_s * 1e3,
            "stall_ms": self.stall_s * 1e3, "front_end_ms": self.front_end_s * 1e3, "source": self.source,
            "models": {name: {
                "execution_ms": {str(b): w * 1e3 for b, w in m.execution_s.items()},
                "observed_max_ms": {str(b): w * 1e3 for b, w in m.observed_max_s.items()},
                "longest_kernel_ms": m.longest_kernel_s * 1e3, "preprocess_ms": m.preprocess_s * 1e3,
                "runs": m.runs} for name, m in self.models.items()},
        }  # fmt: skip

    @classmethod
    def from_json(cls, doc: dict) -> "WcetProfile":
        models = {
            name: ModelWcet({int(b): w * 1e-3 for b, w in m["execution_ms"].items()},
                            {int(b): w * 1e-3 for b, w in m.get("observed_max_ms", {}).items()},
                            m["longest_kernel_ms"] * 1e-3, m.get("preprocess_ms", 0.0) * 1e-3,
                            m.get("runs", 0))
            for name, m in doc["models"].items()
        }  # fmt: skip
        return cls(doc["kind"], doc["margin"], doc["blocking_ms"] * 1e-3, models, doc.get("source", ""),
                   doc.get("stall_ms", 0.0) * 1e-3, doc.get("front_end_ms", 0.0) * 1e-3)

    def merged(self, other: "WcetProfile") -> "WcetProfile":
        """This profile with `other`'s models added or replaced (same vGPU kind)."""
        if other.kind != self.kind:
            raise ValueError(f"cannot merge a {other.kind!r} WCET profile into a {self.kind!r} one")
        return WcetProfile(self.kind, other.margin, max(self.blocking_s, other.blocking_s),
                           {**self.models, **other.models}, other.source, max(self.stall_s, other.stall_s),
                           other.front_end_s or self.front_end_s)  # fmt: skip
