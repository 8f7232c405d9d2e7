"""Load generator: Poisson (or fixed-rate) arrivals of real media requests over KServe v2 HTTP.

Media is generated, not downloaded: photo-like JPEGs (`atoll.bench.corpus.jpeg_bytes`) at
camera-like sizes, and speech-like WAV clips. Requests use the binary tensor extension exactly as `tritonclient` does
(one BYTES element per file), and every response is checked for the model's output shape.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from dataclasses import dataclass, field

import numpy as np

from atoll.protocol import HEADER_LENGTH, join_bytes

IMAGE_SIZES = ((640, 480), (500, 375), (800, 600), (1024, 768), (375, 500), (1280, 720))


def synthetic_wav(rng: np.random.Generator, seconds: float, rate: int = 16000) -> bytes:
    """Speech-like audio: a gliding harmonic source with formant-like weights, syllable envelope."""
    import soundfile

    t = np.arange(int(seconds * rate)) / rate
    f0 = 110 + 30 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6))
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voice = sum(np.sin(k * phase) / k * np.exp(-((k * 120 - 700) / 900) ** 2) for k in range(1, 30))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t + rng.uniform(0, 6)) ** 2
    pcm = 0.3 * voice * envelope + 0.01 * rng.normal(size=t.size)
    buf = io.BytesIO()
    soundfile.write(buf, (pcm / np.abs(pcm).max() * 0.8).astype(np.float32), rate, format="WAV",
                    subtype="PCM_16")  # fmt: skip
    return buf.getvalue()


def infer_body(input_name: str, files: list[bytes], priority: int = 0) -> tuple[bytes, dict[str, str]]:
    """A binary-extension request body with one BYTES element per file; `priority` as Triton's
    request parameter (1 = real-time, 0 = the model's default)."""
    blob = join_bytes(np.array(files, dtype=object))
    parameters = {"binary_data_output": True} | ({"priority": priority} if priority else {})
    header = json.dumps({
        "inputs": [{"name": input_name, "datatype": "BYTES", "shape": [len(files), 1],
                    "parameters": {"binary_data_size": len(blob)}}],
        "parameters": parameters,
    }).encode()  # fmt: skip
    return header + blob, {HEADER_LENGTH: str(len(header)), "Content-Type": "application/octet-stream"}


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


def _percentiles(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {"p50": float("nan"), "p95": float("nan"), "p99": float("nan")}
    ms = np.asarray(latencies) * 1e3
    return {f"p{q}": round(float(np.percentile(ms, q)), 2) for q in (50, 95, 99)}


def summarise(outcomes: list[Outcome], duration: float) -> Summary:
    ok = [o for o in outcomes if o.ok]
    per_model = {}
    for model in sorted({o.model for o in outcomes}):
        mine = [o for o in outcomes if o.model == model]
        per_model[model] = {"requests": len(mine), "errors": sum(not o.ok for o in mine),
                            "latency_ms": _percentiles([o.latency_s for o in mine if o.ok])}  # fmt: skip
    return Summary(
        requests=len(outcomes), errors=len(outcomes) - len(ok), duration_s=round(duration, 3),
        throughput_rps=round(len(ok) / duration, 2) if duration > 0 else 0.0,
        latency_ms=_percentiles([o.latency_s for o in ok]), per_model=per_model,
        error_samples=sorted({o.error for o in outcomes if not o.ok})[:5],
    )  # fmt: skip


async def run_load(url: str, workloads: list[Workload], requests: int, rate: float,
                   arrival: str = "poisson", seed: int = 0, progress: bool = True,
                   timeout_s: float = 60.0) -> Summary:  # fmt: skip
    """Send `requests` requests at `rate` per second; every one is awaited (bounded by timeout_s)."""
    import aiohttp
    from tqdm import tqdm

    rng = np.random.default_rng(seed)
    weights = np.array([w.weight for w in workloads], dtype=float)
    choices = rng.choice(len(workloads), size=requests, p=weights / weights.sum())
    gaps = rng.exponential(1 / rate, requests) if arrival == "poisson" else np.full(requests, 1 / rate)
    outcomes: list[Outcome] = []
    bar = tqdm(total=requests, desc="requests", unit="req", disable=not progress)

    async def one(session: aiohttp.ClientSession, w: Workload, body, headers) -> None:
        start = time.perf_counter()
        try:
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
