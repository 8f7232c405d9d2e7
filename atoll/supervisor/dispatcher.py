"""The dispatcher: rows from every front end, batched by the batcher, placed on vGPU workers.

It runs on the supervisor's event loop. Front ends send `Submit` messages naming rows already made
in their slots. Best-effort rows join the batcher (a pure policy on the loop's clock), which is
polled on every arrival and completion and, with a timer, at its next deadline. Real-time
rows skip it: they go out at once as their own batch (`batching.RtPlacement`), in chunks no larger
than the model's largest batch, and run as RT work in the worker. A batch is a list of slot rows,
padded on the worker to the bucket's upper length; rows whose deadline passed, or whose request gave
up (`Cancel`; its front end died), are dropped unexecuted before their batch is sent. When a batch
finishes, each front end that owns rows of it gets one `Done`; every row submitted gets exactly one.
A stateful model's requests (one row each) go to its sequence batcher (`batching.sequence`) instead,
polled alongside; each of its batches names the rows' sequences, whose states its worker keeps.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import functools
import itertools
import logging
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

from batching import Item, ModelSettings, RtPlacement
from batching.queue_policy import QUEUE_FULL, TIMED_OUT, QueuePolicies
from batching.sequence import SequenceBatcher, SequenceError, SequenceRequest, SequenceSettings, not_one_row
from gpu_runtime.priority import Priority
from gpu_runtime.vgpu import shm
from gpu_runtime.vgpu.messages import Row, RowSequence
from scheduler.rt_envelope import Verdict

from atoll.repository.versions import served_key
from atoll.supervisor import lengths
from atoll.wire.channel import Cancel, Done, Failure, Outbox, Submit
from atoll.wire.responses import Response

log = logging.getLogger(__name__)
PYTHON = "python"  # the `vgpu` of a Python-backend model's runs (its instances are processes of their own)


@dataclass(frozen=True)
class ModelPlan:
    """What the dispatcher needs of a model: how to size and pad its batches."""

    name: str
    version: str
    max_batch: int  # the largest batch it is ever sent (RT rows are chunked to it)
    frame_axis: int | None  # the rows' variable (audio frame) axis, None for fixed-shape models
    padded_frames: tuple[int, ...] = ()  # the lengths batches pad to: each bucket's upper edge
    equal_shapes: bool = False  # a batch holds rows of equal shapes only (models batched unpadded)
    queues: QueuePolicies = QueuePolicies()  # its config's priority levels and queue policies
    sequence: SequenceSettings | None = None  # a stateful model: batched by the sequence batcher
    vgpus: tuple[str, ...] | None = None  # the vGPUs its instance_group places it on (None: every one)

    @property
    def key(self) -> str:
        """The served version's name in `Submit` messages, the batcher and the pool."""
        return served_key(self.name, self.version)

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
    level: int = 0  # its priority level under the model's queue policies
    timed_out_at: float | None = None  # when it has waited too long in the queue (its queue policy)
    delay: bool = False  # timed out, it waits behind the others (DELAY) instead of failing (REJECT)
    request: int = 0  # its request's number: queue policies count requests, not rows
    sequence: RowSequence | None = None  # a stateful model's request: its sequence


def _key(row: Row) -> tuple[str, int]:
    return row.arena, row.index


class FrontEndLink(Outbox):
    """The dispatcher's end of one front end's channel (its answers coalesced per loop round, a
    real-time batch's at once), with the rows it holds here (submitted, not yet answered). It
    outlives its process: a restarted front end takes it over (`writer`), so the answers for what
    its predecessor left here, queued ones too, tell the successor when those slots are free."""

    def __init__(self, writer: asyncio.WriteTransport):
        super().__init__(writer)
        self.outstanding: set[tuple[str, int]] = set()


class Dispatcher:
    """Callbacks on the event loop, no task per batch: a batch costs the loop two wake-ups (the
    message that completes it, the worker's answer), which on a 2-core VM is most of its cost."""

    def __init__(self, plans: dict[str, ModelPlan], pool, batcher, metrics, latency,
                 vgpu_kinds: dict[str, str], python=None, residency=None):
        self.plans = plans
        self.pool = pool
        self.batcher = batcher
        self.metrics = metrics
        self.latency = latency  # LatencyModel fed with every batch's measured run time
        self.vgpu_kinds = vgpu_kinds
        self.python = python  # Python-backend models' instances (atoll.pybackend.PythonModels), beside the pool
        self.residency = residency  # residency_view.ResidencyView: what each vGPU holds, or None
        self.rt_placement = RtPlacement(vgpu_kinds)
        self._ids = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._in_flight = 0
        self._drained = asyncio.Event()
        self._builds: dict[str, int] = defaultdict(int)
        self.rt = None  # rt_admission.RealTime: declared real-time models' envelopes and budgets
        self._queued: dict[tuple[str, int], _Ticket] = {}  # best-effort rows in the batcher, by slot
        # requests with rows in the batcher by (model, priority level), and those rows by request
        self._levels: Counter[tuple[str, int]] = Counter()
        self._request_rows: Counter[int] = Counter()
        self._dropped: set[tuple[str, int]] = set()  # queued rows whose request gave up
        self._sequences: dict[str, SequenceBatcher] = {}  # stateful models' batchers, by served version

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
        """Batch `plan.key` from now on (its vGPU workers have loaded it)."""
        self.batcher.add_model(plan.key, settings)
        if plan.sequence is not None:
            vgpus = plan.vgpus or tuple(self.vgpu_kinds)
            self._sequences[plan.key] = SequenceBatcher(plan.name, plan.sequence, vgpus, plan.max_batch)
        self.plans[plan.key] = plan

    def remove_model(self, name: str) -> None:
        """Stop batching `name`; none of its rows may be anywhere (its front ends drained them)."""
        self.batcher.remove_model(name)
        self._sequences.pop(name, None)
        del self.plans[name]
        if self.residency is not None:
            self.residency.remove(name)

    # -- front ends ---------------------------------------------------------------------------------

    def submit(self, link: FrontEndLink, message: Submit) -> None:
        self.submit_all(link, (message,))

    def submit_all(self, link: FrontEndLink, messages) -> None:
        """Several requests that arrived together: each admitted (real-time rows sent at once), then
        the batcher polled once for all of them."""
        now = self.now()
        if any([self._admit(link, message, now) for message in messages]):
            self._poll()

    def _admit(self, link: FrontEndLink, message: Submit, now: float) -> bool:
        """Admit one request's rows; True when some joined a batcher (which is then due a poll)."""
        tickets = [_Ticket(link, row, message.deadline, now) for row in message.rows]
        link.outstanding.update(_key(row) for row in message.rows)
        plan = self.plans.get(message.model)
        if plan is None:
            self._answer(tickets, None, Failure.REJECTED, f"unknown model {message.model!r}")
            return False
        if self._is_python(plan):  # a request at a time: its model's instances batch what waits for them
            self._send(plan, PYTHON, message.priority, tickets, PYTHON, lambda: None)
            return False
        if plan.sequence is not None:
            return self._sequenced(plan, tickets, message.sequence, now)
        verdict = Verdict.RT
        if message.priority == Priority.RT and self.rt is not None:  # beyond its envelope or budget?
            verdict = self.rt.route(plan.name, len(tickets), now)
            if verdict is Verdict.REFUSE:
                self._answer(tickets, None, Failure.REJECTED, f"real-time model {plan.name!r}: beyond its "
                             "declared envelope or its WCET (atoll.rt.on_violation: refuse)", urgent=True)  # fmt: skip
                return False
        if message.priority == Priority.RT and verdict is Verdict.RT:
            for start in range(0, len(tickets), plan.max_batch):
                load = {vid: state.inflight_runs for vid, state in self.pool.workers.items()}
                vgpu = self.rt_placement.place(plan.vgpus, load=load)
                self._send(plan, vgpu, Priority.RT, tickets[start : start + plan.max_batch], "rt",
                           lambda v=vgpu: self.rt_placement.complete(v))  # fmt: skip
            return False
        level = plan.queues.level(message.level)
        policy = plan.queues.of(level)
        if not policy.admits(self._levels[(plan.key, level)]):
            self._answer(tickets, None, Failure.QUEUE_FULL, QUEUE_FULL)
            return False
        timed_out_at = policy.timed_out_at(now, message.timeout_us)
        delay, request = policy.timeout_action == "DELAY", next(self._ids)
        for ticket in tickets:
            self._queue(plan, _Ticket(link, ticket.row, message.deadline, now, level, timed_out_at, delay, request),
                        now)  # fmt: skip
        return True

    def _sequenced(self, plan: ModelPlan, tickets: list[_Ticket], sequence: RowSequence | None, now: float) -> bool:
        """A stateful model's request (one row: the front end checked it) joins its sequence batcher."""
        ticket = dataclasses.replace(tickets[0], sequence=sequence or RowSequence(0))
        try:
            if len(tickets) != 1:
                raise SequenceError(not_one_row(plan.name))
            self._sequences[plan.key].add(SequenceRequest(ticket, ticket.sequence.corrid, ticket.sequence.start,
                                                          ticket.sequence.end, now))  # fmt: skip
        except SequenceError as exc:
            self._answer(tickets, None, Failure.REJECTED, str(exc))
            return False
        return True

    def _queue(self, plan: ModelPlan, ticket: _Ticket, now: float) -> None:
        try:
            level = ticket.level if plan.queues.priority_levels else 0  # without levels, one queue
            self.batcher.add(Item(next(self._ids), plan.key, lengths.seconds(plan.frames(ticket.row)), now,
                                  ticket, level), now)  # fmt: skip
        except ValueError as exc:  # e.g. longer than every bucket
            self._answer([ticket], None, Failure.REJECTED, str(exc))
            return
        self._queued[_key(ticket.row)] = ticket
        if not self._request_rows[ticket.request]:
            self._levels[(plan.key, ticket.level)] += 1
        self._request_rows[ticket.request] += 1

    def _dequeued(self, plan: ModelPlan, ticket: _Ticket) -> None:
        self._request_rows[ticket.request] -= 1
        if not self._request_rows[ticket.request]:
            del self._request_rows[ticket.request]
            self._levels[(plan.key, ticket.level)] -= 1

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
        now = self.now()
        try:
            dispatches = self.batcher.poll(now)
            deadline = self.batcher.next_deadline()
            sequenced = [(key, seqs, d) for key, seqs in self._sequences.items() for d in seqs.poll(now)]
            deadline = min((d for d in (deadline, *(s.next_deadline() for s in self._sequences.values()))
                            if d is not None), default=None)  # fmt: skip
        except Exception:  # a policy bug must not silently stop every later batch
            log.exception("batcher failed; retrying")
            dispatches, sequenced, deadline = [], [], self.now() + 0.01
        for dispatch in dispatches:
            self._send(self.plans[dispatch.model], dispatch.vgpu, Priority.BE,
                       [item.payload for item in dispatch.items], str(dispatch.bucket),
                       lambda v=dispatch.vgpu: self._be_finished(v))  # fmt: skip
        for key, seqs, dispatch in sequenced:
            finished = functools.partial(self._sequence_finished, seqs, dispatch)
            self._send(self.plans[key], dispatch.vgpu, Priority.BE, [r.payload for r in dispatch.requests],
                       "sequence", finished, dispatch.released)  # fmt: skip
        if deadline is not None:
            self._timer = self._loop.call_at(deadline, self._poll)

    def _sequence_finished(self, batcher: SequenceBatcher, dispatch) -> None:
        batcher.complete(dispatch, self.now())
        self._poll()

    def _be_finished(self, vgpu: str) -> None:
        self.batcher.on_complete(vgpu, self.now())
        self._poll()

    def _send(self, plan: ModelPlan, vgpu: str, priority: Priority, tickets: list[_Ticket], bucket: str,
              finished, released: tuple = ()) -> None:
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
                self._send(plan, vgpu, priority, group, bucket, one_finished, released)
            return
        start = self.now()
        gone, expired, timed_out, delayed, live = [], [], [], [], []
        for t in tickets:
            key = _key(t.row)
            if self._queued.pop(key, None) is not None:
                self._dequeued(plan, t)
            if key in self._dropped:
                self._dropped.discard(key)
                gone.append(t)
            elif t.deadline <= start:
                expired.append(t)
            elif t.timed_out_at is not None and t.timed_out_at <= start:
                (delayed if t.delay else timed_out).append(t)
            else:
                live.append(t)
        if gone:
            self._answer(gone, None, Failure.CANCELLED, "its request gave up before a vGPU took it")
        if expired:
            self._answer(expired, None, Failure.EXPIRED, "its deadline passed before a vGPU took it")
        if timed_out:
            self._answer(timed_out, None, Failure.QUEUE_TIMEOUT, TIMED_OUT)
        if delayed and (live or self._levels[(plan.key, delayed[0].level)]):
            for t in delayed:  # DELAY: behind every row of its level still queued, this batch's too
                self._queue(plan, t, start)
        else:
            live += delayed
        if not live:
            asyncio.get_running_loop().call_soon(finished)  # not from inside the poll that sent it
            return
        m = self.metrics
        m.of(plan.name, plan.version).queue_us.inc(sum(start - t.arrival for t in live) * 1e6)
        m.child(m.batch_size, plan.name, bucket, vgpu).observe(len(live))
        loop = asyncio.get_running_loop()
        try:
            future = self._submit(plan, vgpu, priority, live, released)
        except Exception as exc:  # e.g. the vGPU is dead: every row's request gets the error
            self._answer(live, None, Failure.BACKEND, str(exc) or type(exc).__name__)
            loop.call_soon(finished)
            return
        self._in_flight += 1
        if self.residency is not None:
            self.residency.dispatched(plan.key, vgpu, priority == Priority.RT)
        future.add_done_callback(lambda f: loop.call_soon_threadsafe(
            self._ran, f, plan, vgpu, live, start, finished, priority))

    def _is_python(self, plan: ModelPlan) -> bool:
        return self.python is not None and plan.key in self.python.models

    def _submit(self, plan: ModelPlan, vgpu: str, priority: Priority, live: list[_Ticket], released: tuple):
        rows = tuple(t.row for t in live)
        if not self._is_python(plan):
            sequences = tuple(t.sequence for t in live) if plan.sequence is not None else ()
            return self.pool.submit_rows(vgpu, plan.key, rows, plan.pad_to(max(map(plan.frames, rows))),
                                         priority, sequences, released)  # fmt: skip
        loop, link = asyncio.get_running_loop(), live[0].link  # a Python model's batch is one request

        def on_stream(s) -> None:  # a decoupled model's response, on its instance's thread
            loop.call_soon_threadsafe(self._stream, link, Response(rows[0], s.segment, s.layout, s.final, s.error))

        return self.python.submit_rows(vgpu, plan.key, rows, on_stream=on_stream,
                                       deadline=min(t.deadline for t in live))  # fmt: skip

    @staticmethod
    def _stream(link: FrontEndLink, response: Response) -> None:
        if link.writer.is_closing():  # its front end is gone: nobody will read the segment
            if response.segment is not None:
                shm.unlink(response.segment)
            return
        link.send(response)

    def _ran(self, future, plan: ModelPlan, vgpu: str, live: list[_Ticket], start: float, finished,
             priority: Priority) -> None:
        self._in_flight -= 1
        if self.residency is not None:
            self.residency.completed(plan.key, vgpu)
        if not self._in_flight:
            self._drained.set()
        try:
            layouts = future.result()
        except Exception as exc:  # the batch failed: every row's request gets the error
            self._answer(live, None, Failure.BACKEND, str(exc) or type(exc).__name__, priority == Priority.RT)
        else:
            self._answer(live, layouts, urgent=priority == Priority.RT)
            now = self.now()
            self._account(plan, vgpu, len(live), now - start)
            if priority == Priority.RT and self.rt is not None:
                self.rt.ran(plan.name, len(live), now - start, now - min(t.arrival for t in live))
        finished()

    def _account(self, plan: ModelPlan, vgpu: str, rows: int, elapsed: float) -> None:
        m = self.metrics
        self.latency.observe(plan.key, self.vgpu_kinds.get(vgpu, "cpu"), rows, elapsed)
        m.batch_ran(plan.name, plan.version, rows, elapsed)
        builds = self.pool.workers[vgpu].program_builds if vgpu in self.pool.workers else 0
        if builds > self._builds[vgpu]:
            log.error("vGPU %s built %d program(s) after load (model %s): a shape was not prepared",
                      vgpu, builds - self._builds[vgpu], plan.name)  # fmt: skip
            m.program_builds.labels(vgpu).inc(builds - self._builds[vgpu])
            self._builds[vgpu] = builds

    @staticmethod
    def _answer(tickets: list[_Ticket], layouts, failure: Failure | None = None, reason: str = "",
                urgent: bool = False) -> None:
        """One Done per front end, for its rows of the batch (`urgent`: a real-time batch's, sent at
        once rather than with the loop round's others)."""
        by_link: dict[FrontEndLink, list[int]] = defaultdict(list)
        for i, ticket in enumerate(tickets):
            by_link[ticket.link].append(i)
        for link, mine in by_link.items():
            rows = tuple(tickets[i].row for i in mine)
            link.outstanding.difference_update(map(_key, rows))
            if failure is None:
                link.send(Done(rows, tuple(layouts[i] for i in mine)), urgent)
            else:
                link.send(Done(rows, failure=failure, reason=reason), urgent)
