"""Load-generator processes for `atoll bench serve`: pre-encoded requests over keep-alive HTTP.

The load runs in processes of its own (never in the server's, never in the bench's), each an asyncio
loop with one aiohttp session, so the client's cost is visible (the bench meters their CPU) and
cannot hide inside the server's. Bodies are encoded once, before the clock starts. Open loop: each
process sends a Poisson stream of `rate / processes`; latency counts from the *scheduled* send
time, so a late client shows up as latency and as lateness instead of silently sending less
(coordinated omission). Closed loop: `concurrency` connections in all, each sending its next
request when the previous answer arrives.

Every request leaves one record: (class, scheduled, sent, done, status), with status the HTTP code
or one of CLIENT_ERRORS.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import resource
import time
from dataclasses import dataclass, replace

import numpy as np

TIMEOUT, CONNECTION = -1, -2
CLIENT_ERRORS = {TIMEOUT: "timeout", CONNECTION: "connection"}
RECORD = np.dtype([("cls", "i4"), ("scheduled", "f8"), ("sent", "f8"), ("done", "f8"), ("status", "i4")])


@dataclass(frozen=True)
class Request:
    cls: int  # index of its traffic class (model x priority) in the bench's class list
    path: str  # /v2/models/<model>/infer
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class LoadPlan:
    url: str
    requests: tuple[Request, ...]
    weights: tuple[float, ...]  # chance of each request being the next one sent
    seconds: float  # sending period, warm-up included
    rate: float | None = None  # open loop: Poisson arrivals per second, all processes together
    concurrency: int = 0  # closed loop: connections, all processes together
    timeout_s: float = 60.0
    seed: int = 0
    cpus: tuple[int, ...] = ()  # pin the load processes here (empty: wherever the OS puts them)


def split(plan: LoadPlan, processes: int) -> list[LoadPlan]:
    """One plan per process: the rate or the connections shared out, an independent seed each
    (the sum of independent Poisson streams is the Poisson stream of the summed rate)."""
    out = []
    for i in range(processes):
        rate = plan.rate / processes if plan.rate else None
        concurrency = plan.concurrency // processes + (i < plan.concurrency % processes)
        out.append(replace(plan, rate=rate, concurrency=concurrency, seed=plan.seed * 1000 + i))
    return [p for p in out if p.rate or p.concurrency]


class LoadProcesses:
    """Start the load processes, let them import and connect, then `go()` sends from one shared
    monotonic start (CLOCK_MONOTONIC is system-wide on Linux) and `records()` gathers them."""

    def __init__(self, plans: list[LoadPlan]):
        ctx = multiprocessing.get_context("spawn")
        self.conns, self.procs = [], []
        for plan in plans:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_main, args=(plan, child), name="atoll-bench-load", daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        for conn in self.conns:
            conn.recv()  # "ready"
        self.start = 0.0

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def go(self, lead_s: float = 0.2) -> float:
        self.start = time.monotonic() + lead_s
        for conn in self.conns:
            conn.send(self.start)
        return self.start

    def records(self) -> np.ndarray:
        parts = [conn.recv() for conn in self.conns]
        for proc in self.procs:
            proc.join()
        return np.concatenate(parts) if parts else np.zeros(0, RECORD)

    def close(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join()

    def __enter__(self) -> LoadProcesses:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _main(plan: LoadPlan, conn) -> None:
    if plan.cpus:
        os.sched_setaffinity(0, plan.cpus)
    # an overloaded server leaves thousands of open-loop requests in flight, a socket each
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 65536 if hard == resource.RLIM_INFINITY else hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    conn.send(asyncio.run(_drive(plan, conn)))


async def _drive(plan: LoadPlan, conn) -> np.ndarray:
    import aiohttp

    rng = np.random.default_rng(plan.seed)
    p = np.asarray(plan.weights, dtype=float)
    p /= p.sum()
    records: list[tuple] = []
    timeout = aiohttp.ClientTimeout(total=plan.timeout_s)
    # an open loop may need a connection per request in flight; a closed loop one per client
    limit = plan.concurrency or 4096
    async with aiohttp.ClientSession(plan.url, timeout=timeout, skip_auto_headers=("User-Agent",),
                                     connector=aiohttp.TCPConnector(limit=limit)) as session:
        conn.send("ready")
        start = await asyncio.to_thread(conn.recv)
        end = start + plan.seconds

        async def one(request: Request, scheduled: float) -> None:
            sent = time.monotonic()
            try:
                async with session.post(request.path, data=request.body,
                                        headers=request.headers) as resp:
                    await resp.read()
                    status = resp.status
            except asyncio.TimeoutError:
                status = TIMEOUT
            except aiohttp.ClientError:
                status = CONNECTION
            records.append((request.cls, scheduled, sent, time.monotonic(), status))

        picks: list[int] = []

        def pick() -> Request:  # drawn in bulk: a weighted draw costs tens of microseconds
            if not picks:
                picks.extend(rng.choice(len(plan.requests), size=4096, p=p).tolist())
            return plan.requests[picks.pop()]

        if plan.rate:
            tasks = set()
            t = start + rng.exponential(1 / plan.rate)
            while t < end:
                delay = t - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(one(pick(), t))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                t += rng.exponential(1 / plan.rate)
            await asyncio.gather(*tasks)
        else:
            async def client() -> None:
                await asyncio.sleep(max(0.0, start - time.monotonic()))
                while (now := time.monotonic()) < end:
                    await one(pick(), now)

            await asyncio.gather(*(client() for _ in range(plan.concurrency)))
    return np.array(records, dtype=RECORD)
