"""The dispatcher: rows from every front end, batched by the batcher, placed on vGPU workers.

It runs on the supervisor's event loop. Front ends send `Submit` messages naming rows already made
in their slots. Best-effort rows join the batcher (a pure policy on the loop's clock), which is
polled on every arrival and completion and, with a timer, at its next deadline. Real-time
rows skip it: they go out at once as their own batch (`batching.RtPlacement`), in chunks no larger
than the model's largest batch, and run as RT work in the worker. A batch is a list of slot rows,
padded on the worker to the bucket's upper length; rows whose deadline passed, or whose request gave
up (`Cancel`; its front end died), are dropped unexecuted before their batch is sent. When a batch
finishes, each front end that owns rows of it gets one `Done`; every row submitted gets exactly one.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
import time
from collections import defaultdict
from dataclasses import dataclass

from batching import Item, ModelSettings, RtPlacement
from gpu_runtime.priority import Priority
from gpu_runtime.vgpu.messages import Row
from scheduler.rt_envelope import Verdict

from atoll.supervisor import lengths
from atoll.wire import channel
from atoll.wire.channel import Cancel, Done, Failure, Submit

log = logging.getLogger("atoll.supervisor.dispatcher")


@dataclass(frozen=True)
class ModelPlan:
    """What the dispatcher needs of a model: how to size and pad its batches."""

    name: str
    version: str
    max_batch: int  # the largest batch it is ever sent (RT rows are chunked to it)
    frame_axis: int | None  # the rows' variable (audio frame) axis, None for fixed-shape models
    padded_frames: tuple[int, ...] = ()  # the lengths batches pad to: each bucket's upper edge
    equal_shapes: bool = False  # a batch holds rows of equal shapes only (models batched unpadded)

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
    """One row, from its submission to its answer."""

    link: FrontEndLink
    row: Row
    deadline: float
    arrival: float


def _key(row: Row) -> tuple[str, int]:
    return row.arena, row.index


class FrontEndLink:
    """The dispatcher's end of one front end's channel, with the rows it holds here (submitted, not
    yet answered). It outlives its process: a restarted front end takes it over (`writer`), so the
    answers for what its predecessor left here tell the successor when those slots are free."""

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer
        self.outstanding: set[tuple[str, int]] = set()

    def send(self, message) -> None:
        if not self.writer.is_closing():
            self.writer.write(channel.encode(message))


class Dispatcher:
    """Callbacks on the event loop, no task per batch: a batch costs the loop two wake-ups (the
    message that completes it, the worker's answer), which on a 2-core VM is most of its cost."""

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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._in_flight = 0
        self._drained = asyncio.Event()
        self._builds: dict[str, int] = defaultdict(int)
        self.rt = None  # rt_admission.RealTime: declared real-time models' envelopes and budgets
        self._queued: dict[tuple[str, int], _Ticket] = {}  # best-effort rows in the batcher, by slot
        self._dropped: set[tuple[str, int]] = set()  # queued rows whose request gave up

    @staticmethod
    def now() -> float:
        return time.monotonic()  # the event loop's clock too: timers are set on it directly

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._poll()

    async def stop(self, timeout_s: float = 30.0) -> None:
        """Stop polling and wait (bounded) for the batches in flight."""
        if self._timer is not None:
            self._timer.cancel()
        self._loop = None
        if self._in_flight:
            self._drained.clear()
            try:
                await asyncio.wait_for(self._drained.wait(), timeout_s)
            except TimeoutError:
                log.warning("%d batch(es) still running at shutdown", self._in_flight)

    # -- models -------------------------------------------------------------------------------------

    def add_model(self, plan: ModelPlan, settings: ModelSettings) -> None:
        """Batch `plan.name` from now on (its vGPU workers have loaded it)."""
        self.batcher.add_model(plan.name, settings)
        self.plans[plan.name] = plan

    def remove_model(self, name: str) -> None:
        """Stop batching `name`; none of its rows may be anywhere (its front ends drained them)."""
        self.batcher.remove_model(name)
        del self.plans[name]

    # -- front ends ---------------------------------------------------------------------------------

    def submit(self, link: FrontEndLink, message: Submit) -> None:
        now = self.now()
        tickets = [_Ticket(link, row, message.deadline, now) for row in message.rows]
        link.outstanding.update(_key(row) for row in message.rows)
        plan = self.plans.get(message.model)
        if plan is None:
            self._answer(tickets, None, Failure.REJECTED, f"unknown model {message.model!r}")
            return
        verdict = Verdict.RT
        if message.priority == Priority.RT and self.rt is not None:  # beyond its envelope or budget?
            verdict = self.rt.route(plan.name, len(tickets), now)
            if verdict is Verdict.REFUSE:
                self._answer(tickets, None, Failure.REJECTED, f"real-time model {plan.name!r}: beyond its "
                             "declared envelope or its WCET (atoll.rt.on_violation: refuse)")  # fmt: skip
                return
        if message.priority == Priority.RT and verdict is Verdict.RT:
            for start in range(0, len(tickets), plan.max_batch):
                load = {vid: state.inflight_runs for vid, state in self.pool.workers.items()}
                vgpu = self.rt_placement.place(load=load)
                self._send(plan, vgpu, Priority.RT, tickets[start : start + plan.max_batch], "rt",
                           lambda v=vgpu: self.rt_placement.complete(v))  # fmt: skip
            return
        for ticket in tickets:
            try:
                self.batcher.add(Item(next(self._ids), plan.name, lengths.seconds(plan.frames(ticket.row)), now,
                                      ticket), now)  # fmt: skip
            except ValueError as exc:  # e.g. longer than every bucket
                self._answer([ticket], None, Failure.REJECTED, str(exc))
                continue
            self._queued[_key(ticket.row)] = ticket
        self._poll()

    def cancel(self, message: Cancel) -> None:
        """Drop the rows still queued (when their batch forms): a slot is in one request at a time,
        so a row not queued now has run or is running, and its answer is on its way."""
        self._dropped.update(key for row in message.rows if (key := _key(row)) in self._queued)

    def forget(self, link: FrontEndLink) -> frozenset[tuple[str, int]]:
        """The link's front end died: drop its queued rows; returns every row it still holds here,
        whose slots its successor must not use before their answers arrive."""
        self._dropped.update(key for key, ticket in self._queued.items() if ticket.link is link)
        return frozenset(link.outstanding)

    # -- batches ------------------------------------------------------------------------------------

    def _poll(self) -> None:
        """Send every batch the batcher has due, and come back at its next deadline."""
        if self._loop is None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            dispatches = self.batcher.poll(self.now())
            deadline = self.batcher.next_deadline()
        except Exception:  # a policy bug must not silently stop every later batch
            log.exception("batcher failed; retrying")
            dispatches, deadline = [], self.now() + 0.01
        for dispatch in dispatches:
            self._send(self.plans[dispatch.model], dispatch.vgpu, Priority.BE,
                       [item.payload for item in dispatch.items], str(dispatch.bucket),
                       lambda v=dispatch.vgpu: self._be_finished(v))  # fmt: skip
        if deadline is not None:
            self._timer = self._loop.call_at(deadline, self._poll)

    def _be_finished(self, vgpu: str) -> None:
        self.batcher.on_complete(vgpu, self.now())
        self._poll()

    def _send(self, plan: ModelPlan, vgpu: str, priority: Priority, tickets: list[_Ticket], bucket: str,
              finished) -> None:
        """Run the tickets' rows as one batch on `vgpu`; `finished` runs on the loop once it is over.
        A model batched unpadded runs a batch per shape among them (`finished` once all are over)."""
        groups = defaultdict(list)
        for t in tickets if plan.equal_shapes else ():
            groups[t.row.shapes].append(t)
        if len(groups) > 1:
            left = [len(groups)]

            def one_finished() -> None:
                left[0] -= 1
                if not left[0]:
                    finished()

            for group in groups.values():
                self._send(plan, vgpu, priority, group, bucket, one_finished)
            return
        start = self.now()
        gone, expired, live = [], [], []
        for t in tickets:
            key = _key(t.row)
            self._queued.pop(key, None)
            if key in self._dropped:
                self._dropped.discard(key)
                gone.append(t)
            else:
                (live if t.deadline > start else expired).append(t)
        if gone:
            self._answer(gone, None, Failure.CANCELLED, "its request gave up before a vGPU took it")
        if expired:
            self._answer(expired, None, Failure.EXPIRED, "its deadline passed before a vGPU took it")
        if not live:
            asyncio.get_running_loop().call_soon(finished)  # not from inside the poll that sent it
            return
        m, labels = self.metrics, (plan.name, plan.version)
        m.queue_us.labels(*labels).inc(sum(start - t.arrival for t in live) * 1e6)
        m.batch_size.labels(plan.name, bucket, vgpu).observe(len(live))
        rows = tuple(t.row for t in live)
        loop = asyncio.get_running_loop()
        try:
            future = self.pool.submit_rows(vgpu, plan.name, rows, plan.pad_to(max(map(plan.frames, rows))),
                                           priority)  # fmt: skip
        except Exception as exc:  # e.g. the vGPU is dead: every row's request gets the error
            self._answer(live, None, Failure.BACKEND, f"{type(exc).__name__}: {exc}")
            loop.call_soon(finished)
            return
        self._in_flight += 1
        future.add_done_callback(lambda f: loop.call_soon_threadsafe(
            self._ran, f, plan, vgpu, live, start, finished, priority))

    def _ran(self, future, plan: ModelPlan, vgpu: str, live: list[_Ticket], start: float, finished,
             priority: Priority) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            self._drained.set()
        try:
            layouts = future.result()
        except Exception as exc:  # the batch failed: every row's request gets the error
            self._answer(live, None, Failure.BACKEND, f"{type(exc).__name__}: {exc}")
        else:
            self._answer(live, layouts)
            now = self.now()
            self._account(plan, vgpu, len(live), now - start)
            if priority == Priority.RT and self.rt is not None:
                self.rt.ran(plan.name, len(live), now - start, now - min(t.arrival for t in live))
        finished()

    def _account(self, plan: ModelPlan, vgpu: str, rows: int, elapsed: float) -> None:
        m, labels = self.metrics, (plan.name, plan.version)
        self.latency.observe(plan.name, self.vgpu_kinds.get(vgpu, "cpu"), rows, elapsed)
        m.exec_count.labels(*labels).inc()
        m.count.labels(*labels).inc(rows)
        m.compute_us.labels(*labels).inc(elapsed * rows * 1e6)  # Triton's: each inference's batch time
        m.batch_runs.labels(*labels, rows).inc()
        m.batch_compute_us.labels(*labels, rows).inc(elapsed * 1e6)
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
            link.outstanding.difference_update(map(_key, rows))
            if failure is None:
                link.send(Done(rows, tuple(layouts[i] for i in mine)))
            else:
                link.send(Done(rows, failure=failure, reason=reason))
