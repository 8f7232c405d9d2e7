"""The dispatcher: rows from every front end, batched by the batcher, placed on vGPU workers.

It runs on the supervisor's event loop. Front ends send `Submit` messages naming rows already made
in their slots. Best-effort rows join the batcher (a pure policy on the loop's clock); one task
polls it on every arrival and completion and otherwise sleeps until its next deadline. Real-time
rows skip it: they go out at once as their own batch (`batching.RtPlacement`), in chunks no larger
than the model's largest batch, and run as RT work in the worker. A batch is a list of slot rows,
padded on the worker to the bucket's upper length; rows whose deadline passed are dropped before
their batch is sent. When a batch finishes, each front end that owns rows of it gets one `Done`.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
import time
from collections import defaultdict
from dataclasses import dataclass

from batching import Item, RtPlacement
from gpu_runtime.priority import Priority
from gpu_runtime.vgpu.messages import Row

from atoll import channel, lengths
from atoll.channel import Done, Failure, Submit

log = logging.getLogger("atoll.dispatcher")


@dataclass(frozen=True)
class ModelPlan:
    """What the dispatcher needs of a model: how to size and pad its batches."""

    name: str
    version: str
    max_batch: int  # the largest batch it is ever sent (RT rows are chunked to it)
    frame_axis: int | None  # the rows' variable (audio frame) axis, None for fixed-shape models
    padded_frames: tuple[int, ...] = ()  # the lengths batches pad to: each bucket's upper edge

    def pad_to(self, longest: int) -> int | None:
        """The padded length of a batch whose longest row has `longest` frames."""
        if self.frame_axis is None:
            return None
        k = bisect.bisect_left(self.padded_frames, longest)
        if k == len(self.padded_frames):
            raise ValueError(f"{longest} frames exceed the longest bucket ({self.padded_frames[-1]})")
        return self.padded_frames[k]

    def frames(self, row: Row) -> int:
        return row.shape[self.frame_axis] if self.frame_axis is not None else 1


@dataclass(frozen=True)
class _Ticket:
    """One best-effort row waiting in the batcher."""

    link: FrontEndLink
    row: Row
    deadline: float
    arrival: float


class FrontEndLink:
    """The dispatcher's end of one front end's channel."""

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer

    def send(self, message) -> None:
        if not self.writer.is_closing():
            self.writer.write(channel.encode(message))


class Dispatcher:
    def __init__(self, plans: dict[str, ModelPlan], pool, batcher, metrics, latency,
                 vgpu_kinds: dict[str, str]):
        self.plans = plans
        self.pool = pool
        self.batcher = batcher
        self.metrics = metrics
        self.latency = latency  # LatencyModel fed with every batch's measured run time
        self.vgpu_kinds = vgpu_kinds
        self.rt_placement = RtPlacement(vgpu_kinds)
        self._ids = itertools.count()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._running: set[asyncio.Task] = set()
        self._builds: dict[str, int] = defaultdict(int)

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def start(self) -> None:
        self._task = asyncio.create_task(self._drive_batcher(), name="batcher")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.gather(*self._running, return_exceptions=True)

    # -- front ends ---------------------------------------------------------------------------------

    def submit(self, link: FrontEndLink, message: Submit) -> None:
        plan = self.plans.get(message.model)
        if plan is None:
            link.send(Done(message.rows, failure=Failure.REJECTED, reason=f"unknown model {message.model!r}"))
            return
        now = self.now()
        if message.priority == Priority.RT:
            for start in range(0, len(message.rows), plan.max_batch):
                rows = message.rows[start : start + plan.max_batch]
                self._spawn(self._run_rt(plan, link, rows, message.deadline, now))
            return
        for row in message.rows:
            ticket = _Ticket(link, row, message.deadline, now)
            try:
                self.batcher.add(Item(next(self._ids), plan.name, lengths.seconds(plan.frames(row)), now,
                                      ticket), now)  # fmt: skip
            except ValueError as exc:  # e.g. longer than every bucket
                link.send(Done((row,), failure=Failure.REJECTED, reason=str(exc)))
        self._wake.set()

    # -- batches ------------------------------------------------------------------------------------

    def _spawn(self, coroutine) -> None:
        task = asyncio.create_task(coroutine)
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _drive_batcher(self) -> None:
        while True:
            self._wake.clear()
            try:
                dispatches = self.batcher.poll(self.now())
                deadline = self.batcher.next_deadline()
            except Exception:  # a policy bug must not silently stop every later batch
                log.exception("batcher failed; retrying")
                dispatches, deadline = [], self.now() + 0.01
            for dispatch in dispatches:
                self._spawn(self._run_batch(dispatch))
            timeout = None if deadline is None else max(0.0, deadline - self.now())
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass

    async def _run_rt(self, plan: ModelPlan, link: FrontEndLink, rows: tuple[Row, ...], deadline: float,
                      arrival: float) -> None:
        load = {vid: state.inflight_runs for vid, state in self.pool.workers.items()}
        vgpu = self.rt_placement.place(load=load)
        try:
            tickets = [_Ticket(link, row, deadline, arrival) for row in rows]
            await self._execute(plan, vgpu, Priority.RT, tickets, "rt")
        finally:
            self.rt_placement.complete(vgpu)

    async def _run_batch(self, dispatch) -> None:
        try:
            await self._execute(self.plans[dispatch.model], dispatch.vgpu, Priority.BE,
                                [item.payload for item in dispatch.items], str(dispatch.bucket))
        finally:
            self.batcher.on_complete(dispatch.vgpu, self.now())
            self._wake.set()

    async def _execute(self, plan: ModelPlan, vgpu: str, priority: Priority, tickets: list[_Ticket],
                       bucket: str) -> None:
        """Run the tickets' rows as one batch on `vgpu` and tell each front end how its rows went."""
        start = self.now()
        live = [t for t in tickets if t.deadline > start]
        if len(live) < len(tickets):
            self._answer([t for t in tickets if t.deadline <= start], None, Failure.EXPIRED,
                         "its deadline passed before a vGPU took it")  # fmt: skip
        if not live:
            return
        m, labels = self.metrics, (plan.name, plan.version)
        m.queue_us.labels(*labels).inc(sum(start - t.arrival for t in live) * 1e6)
        m.batch_size.labels(plan.name, bucket, vgpu).observe(len(live))
        rows = tuple(t.row for t in live)
        try:
            length = plan.pad_to(max(plan.frames(row) for row in rows))
            layouts = await asyncio.wrap_future(self.pool.submit_rows(vgpu, plan.name, rows, length, priority))
        except Exception as exc:  # the batch failed: every row's request gets the error
            self._answer(live, None, Failure.BACKEND, f"{type(exc).__name__}: {exc}")
            return
        self._answer(live, layouts)
        elapsed = self.now() - start
        self.latency.observe(plan.name, self.vgpu_kinds.get(vgpu, "cpu"), len(live), elapsed)
        m.exec_count.labels(*labels).inc()
        m.count.labels(*labels).inc(len(live))
        m.compute_us.labels(*labels).inc(elapsed * 1e6)
        builds = self.pool.workers[vgpu].program_builds
        if builds > self._builds[vgpu]:
            log.error("vGPU %s built %d program(s) after load (model %s): a shape was not prepared",
                      vgpu, builds - self._builds[vgpu], plan.name)  # fmt: skip
            m.program_builds.labels(vgpu).inc(builds - self._builds[vgpu])
            self._builds[vgpu] = builds

    @staticmethod
    def _answer(tickets: list[_Ticket], layouts, failure: Failure | None = None, reason: str = "") -> None:
        """One Done per front end, for its rows of the batch."""
        by_link: dict[FrontEndLink, list[int]] = defaultdict(list)
        for i, ticket in enumerate(tickets):
            by_link[ticket.link].append(i)
        for link, mine in by_link.items():
            rows = tuple(tickets[i].row for i in mine)
            if failure is None:
                link.send(Done(rows, tuple(layouts[i] for i in mine)))
            else:
                link.send(Done(rows, failure=failure, reason=reason))
