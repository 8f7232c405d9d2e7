"""Load generator: Poisson (or fixed-rate) arrivals of real media requests over KServe v2 HTTP.

Media is generated, not downloaded: photo-like JPEGs and speech-like WAV clips
(`atoll.bench.corpus`). Request bodies (`atoll.bench.bodies`) use the binary tensor extension exactly
as `tritonclient` does (one BYTES element per file), and every response is checked for the model's
output shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import aiohttp
import numpy as np
from tqdm import tqdm

from atoll.bench.harness import percentiles
from atoll.kserve.protocol import HEADER_LENGTH

LATENCY_QS = (50, 95, 99)
IMAGE_SIZES = ((640, 480), (500, 375), (800, 600), (1024, 768), (375, 500), (1280, 720))


@dataclass
class Workload:
    model: str
    input_name: str
    bodies: list[tuple[bytes, dict[str, str]]]
    weight: float = 1.0
    label: str = ""  # how the summary names it (default: the model)


@dataclass
class Outcome:
    model: str
    latency_s: float
    ok: bool
    error: str = ""


@dataclass
class Summary:
    requests: int
    errors: int
    duration_s: float
    throughput_rps: float
    latency_ms: dict[str, float]
    per_model: dict[str, dict] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"requests": self.requests, "errors": self.errors, "duration_s": self.duration_s,
                "throughput_rps": self.throughput_rps, "latency_ms": self.latency_ms,
                "per_model": self.per_model, "error_samples": self.error_samples}  # fmt: skip


def summarise(outcomes: list[Outcome], duration: float) -> Summary:
    ok = [o for o in outcomes if o.ok]
    per_model = {}
    for model in sorted({o.model for o in outcomes}):
        mine = [o for o in outcomes if o.model == model]
        per_model[model] = {"requests": len(mine), "errors": sum(not o.ok for o in mine),
                            "latency_ms": percentiles([o.latency_s for o in mine if o.ok], qs=LATENCY_QS,
                                                      digits=2)}  # fmt: skip
    return Summary(
        requests=len(outcomes), errors=len(outcomes) - len(ok), duration_s=round(duration, 3),
        throughput_rps=round(len(ok) / duration, 2) if duration > 0 else 0.0,
        latency_ms=percentiles([o.latency_s for o in ok], qs=LATENCY_QS, digits=2), per_model=per_model,
        error_samples=sorted({o.error for o in outcomes if not o.ok})[:5],
    )  # fmt: skip


async def run_load(url: str, workloads: list[Workload], requests: int, rate: float,
                   arrival: str = "poisson", seed: int = 0, progress: bool = True,
                   timeout_s: float = 60.0, guard=None) -> Summary:  # fmt: skip
    """Send `requests` requests at `rate` per second; every one is awaited (bounded by timeout_s).
    `guard(model)`, an async context manager, is entered around each request and timed with it
    (`bench switch`'s explicit loads)."""

    rng = np.random.default_rng(seed)
    weights = np.array([w.weight for w in workloads], dtype=float)
    choices = rng.choice(len(workloads), size=requests, p=weights / weights.sum())
    gaps = rng.exponential(1 / rate, requests) if arrival == "poisson" else np.full(requests, 1 / rate)
    outcomes: list[Outcome] = []
    bar = tqdm(total=requests, desc="requests", unit="req", disable=not progress)

    async def one(session: aiohttp.ClientSession, w: Workload, body, headers) -> None:
        start = time.perf_counter()
        try:
            async with guard(w.model) if guard else contextlib.nullcontext():
                async with session.post(f"{url}/v2/models/{w.model}/infer", data=body,
                                        headers=headers) as resp:  # fmt: skip
                    payload = await resp.read()
                    ok = resp.status == 200 and HEADER_LENGTH in resp.headers
                    error = "" if ok else f"HTTP {resp.status}: {payload[:200].decode(errors='replace')}"
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            ok, error = False, f"{type(exc).__name__}: {exc}"
        outcomes.append(Outcome(w.label or w.model, time.perf_counter() - start, ok, error))
        bar.update(1)

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=256)) as s:
        tasks = []
        begin = time.perf_counter()
        next_at = begin
        for i in range(requests):
            next_at += gaps[i]
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            w = workloads[choices[i]]
            body, headers = w.bodies[i % len(w.bodies)]
            tasks.append(asyncio.create_task(one(s, w, body, headers)))
        await asyncio.gather(*tasks)
        duration = time.perf_counter() - begin
    bar.close()
    return summarise(outcomes, duration)


def format_table(summary: Summary) -> str:
    rows = [("model", "requests", "errors", "p50 ms", "p95 ms", "p99 ms")]
    for model, m in summary.per_model.items():
        lat = m["latency_ms"]
        rows.append((model, m["requests"], m["errors"], lat["p50"], lat["p95"], lat["p99"]))
    lat = summary.latency_ms
    rows.append(("all", summary.requests, summary.errors, lat["p50"], lat["p95"], lat["p99"]))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(v).rjust(w) if i else str(v).ljust(w) for i, (v, w) in
                       enumerate(zip(row, widths))) for row in rows]  # fmt: skip
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(f"throughput {summary.throughput_rps} req/s over {summary.duration_s} s")
    return "\n".join(lines)
