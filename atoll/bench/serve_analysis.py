"""What `atoll bench serve` makes of the load processes' records: one result row per load point,
the rate sweep, and the throughput-vs-p99 plot. Pure functions of the records (no clock)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from atoll.bench.harness import percentiles
from atoll.bench.loadproc import CLIENT_ERRORS

QS = (50, 95, 99)
MIN_SERVED = 0.9  # a rate is met only if at least this share of it was answered in the window
MAX_ERRORS = 0.01
# the load generator kept up: it sent >= this share of what it scheduled in the window, with a
# median delay below MAX_LAG_MS (a p99 delay alone is the OS scheduling it late on busy cores)
MIN_SENT, MAX_LAG_MS = 0.95, 5.0
MAX_LOAD_CORE = 0.85  # a load process busier than this is the bottleneck, not the server


def _latency(records: np.ndarray) -> dict:
    return percentiles(records["done"] - records["scheduled"], qs=QS, digits=2)


def _errors(records: np.ndarray) -> dict[str, int]:
    codes = Counter(int(s) for s in records["status"] if s != 200)
    return {CLIENT_ERRORS.get(code, str(code)): n for code, n in sorted(codes.items())}


def summarise(records: np.ndarray, classes: tuple[str, ...], window: tuple[float, float],
              rate: float | None) -> dict:
    """The row of one load point: requests scheduled inside `window` (monotonic start, end) count
    for latency and errors; answers received inside it for throughput."""
    t0, t1 = window
    seconds = t1 - t0
    inside = records[(records["scheduled"] >= t0) & (records["scheduled"] < t1)]
    ok = records["status"] == 200
    served = ok & (records["done"] >= t0) & (records["done"] < t1)
    per_class = {}
    for i, name in enumerate(classes):
        mine = inside[inside["cls"] == i]
        per_class[name] = {"requests": int(mine.size),
                           "throughput_rps": round(int((served & (records["cls"] == i)).sum()) / seconds, 2),
                           "latency_ms": _latency(mine[mine["status"] == 200]), "errors": _errors(mine)}  # fmt: skip
    sent = int(((inside["sent"] >= t0) & (inside["sent"] < t1)).sum())
    load = {"sent_rps": round(sent / seconds, 2), "sent_ratio": round(sent / max(inside.size, 1), 3),
            "lateness_ms": percentiles(inside["sent"] - inside["scheduled"], qs=(50, 99), digits=2)}
    return {
        "rate_rps": rate, "throughput_rps": round(int(served.sum()) / seconds, 2),
        "latency_ms": _latency(inside[inside["status"] == 200]), "requests": int(inside.size),
        "per_class": per_class, "errors": _errors(inside), "loadgen": load,
    }  # fmt: skip


def class_latencies(records: np.ndarray, classes: list[int], window: tuple[float, float]) -> np.ndarray:
    """Seconds from schedule to answer of the answered requests of `classes` scheduled in `window`
    (what `summarise` takes each class's percentiles of), for pooling over several points."""
    t0, t1 = window
    mine = records[np.isin(records["cls"], classes) & (records["scheduled"] >= t0) & (records["scheduled"] < t1)
                   & (records["status"] == 200)]  # fmt: skip
    return mine["done"] - mine["scheduled"]


def loadgen_saturated(row: dict, processes: int) -> bool:
    """Whether the load generator, not the server, limited this point: in open loop it fell behind
    its schedule; in either mode its processes were nearly a full core each."""
    load = row["loadgen"]
    late = (load["lateness_ms"]["p50"] or 0.0) > MAX_LAG_MS or load["sent_ratio"] < MIN_SENT
    busy = (row.get("cpu_cores", {}).get("load") or 0.0) > MAX_LOAD_CORE * processes
    return bool(row["rate_rps"] and late) or busy


def meets(row: dict, slo_ms: float) -> bool:
    """p99 within the SLO, the offered rate served, and (almost) no errors."""
    p99 = row["latency_ms"]["p99"]
    errors = sum(row["errors"].values())
    return (p99 is not None and p99 <= slo_ms and row["throughput_rps"] >= MIN_SERVED * row["rate_rps"]
            and errors <= MAX_ERRORS * max(row["requests"], 1))  # fmt: skip


def sweep(measure: Callable[[float], dict], start: float, slo_ms: float, grow: float = 1.25,
          refine: int = 2, max_points: int = 10) -> tuple[list[dict], float | None]:
    """Rows measured and the highest rate found that meets the SLO (None if none did). From
    `start`, rates grow by `grow` while they pass (or halve while they fail) until one passing and
    one failing rate bracket the capacity; `refine` bisections then narrow the bracket."""
    rows: list[dict] = []
    passed = failed = None
    rate = start
    while len(rows) < max_points and (passed is None or failed is None):
        rows.append(measure(rate))
        if meets(rows[-1], slo_ms):
            passed = rate
            rate = rate * grow
        else:
            failed = rate
            rate = rate / 2
    for _ in range(refine):
        if passed is None or failed is None or len(rows) >= max_points:
            break
        mid = (passed + failed) / 2
        rows.append(measure(mid))
        if meets(rows[-1], slo_ms):
            passed = mid
        else:
            failed = mid
    return rows, passed


def curve_label(row: dict) -> str:
    return f"{row['server']} {row['input']} {row['mix']}" + (f" rt {row['rt_share']:g}" if row["rt_share"] else "")


def plot(rows: list[dict], slo_ms: float, title: str, path: Path) -> None:
    """Throughput vs p99, one curve per configuration (open-loop points by rate), closed-loop
    points as separate markers; beside it, each point's server CPU-ms per request by stage."""
    import matplotlib  # heavy: only --plot draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy: only --plot draws

    rows = [r for r in rows if r["mode"] in ("open", "closed")]  # not the real-time isolation points
    fig, (ax, bars) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    for label in dict.fromkeys(curve_label(r) for r in rows):
        mine = [r for r in rows if curve_label(r) == label and r["latency_ms"]["p99"] is not None]
        open_loop = sorted((r for r in mine if r["rate_rps"]), key=lambda r: r["rate_rps"])
        (line,) = ax.plot([r["throughput_rps"] for r in open_loop], [r["latency_ms"]["p99"] for r in open_loop],
                          "o-", label=label)  # fmt: skip
        closed = [r for r in mine if not r["rate_rps"]]
        ax.plot([r["throughput_rps"] for r in closed], [r["latency_ms"]["p99"] for r in closed], "s",
                color=line.get_color(), mfc="none")  # fmt: skip
    ax.axhline(slo_ms, color="grey", ls="--", lw=0.8, label=f"SLO {slo_ms:g} ms")
    ax.set_yscale("log")
    ax.set_xlabel("throughput (req/s)")
    ax.set_ylabel("p99 latency (ms)")
    ax.set_title(title + " (squares: closed loop)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _stage_bars(bars, [r for r in rows if r.get("cpu_account")])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _stage_bars(ax, rows: list[dict]) -> None:
    """One horizontal bar per load point: the server's CPU-ms per request, split by stage."""
    labels = [f"{curve_label(r)} {r['concurrency']} conn" if r["concurrency"] else f"{curve_label(r)} {r['rate_rps']:g}/s"
              for r in rows]  # fmt: skip
    stages = list(dict.fromkeys(s for r in rows for s in r["cpu_account"]["stages_cpu_ms_per_request"]))
    left = [0.0] * len(rows)
    for stage in stages:
        widths = [r["cpu_account"]["stages_cpu_ms_per_request"].get(stage, 0.0) for r in rows]
        ax.barh(labels, widths, left=left, label=stage)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlabel("server CPU-ms per request")
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    if stages:  # no run kept an account (a server without per-thread clocks): an empty chart
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    ax.grid(axis="x", alpha=0.3)
