"""The dispatcher over a stand-in worker pool: best-effort rows batched by PREBA and padded to their
bucket's upper length, real-time rows sent at once (in chunks of the largest batch), rows whose
deadline passed answered EXPIRED without running, rows whose request gave up (or whose front end
died) dropped unexecuted, one Done per front end per batch."""

from __future__ import annotations

import asyncio
import pickle
from concurrent.futures import Future
from dataclasses import dataclass

from batching import BucketPolicy, ModelBatching, ModelSettings, TritonConfig, make_batcher
from gpu_runtime.priority import Priority
from gpu_runtime.vgpu.messages import Row

from atoll.observe.metrics import Metrics
from atoll.supervisor import lengths
from atoll.supervisor.dispatcher import Dispatcher, FrontEndLink, ModelPlan
from atoll.supervisor.latency_model import LatencyModel
from atoll.wire.channel import Cancel, Done, Failure, Submit

AUDIO = ModelPlan("asr", "1", max_batch=2, frame_axis=1, padded_frames=(251, 501))
PLANS = {AUDIO.key: AUDIO}  # by served version: "asr/1"
POLICY = {AUDIO.key: ModelBatching("audio", (BucketPolicy(2.5, 2, 0.001), BucketPolicy(5.0, 2, 0.001)))}
# batches go only when full: a lone row stays queued
PATIENT = {AUDIO.key: ModelBatching("audio", (BucketPolicy(2.5, 2, 3600.0), BucketPolicy(5.0, 2, 3600.0)))}


@dataclass
class _State:
    inflight_runs: int = 0
    program_builds: int = 0


class StandInPool:
    """Records each batch; the test decides when it finishes."""

    def __init__(self):
        self.workers = {"cpu0": _State()}
        self.batches: list[tuple] = []
        self.sequences: list[tuple] = []  # each batch's (sequences, released): stateful models'

    def submit_rows(self, vgpu, model, rows, length, priority, sequences=(), released=()) -> Future:
        future = Future()
        self.batches.append((vgpu, model, rows, length, priority, future))
        self.sequences.append((sequences, released))
        return future


class Writer:
    def __init__(self):
        self.messages = []

    def is_closing(self):
        return False

    def write(self, data: bytes):
        frame = pickle.loads(data[4:])  # a message, or a list of them (channel.Outbox)
        self.messages.extend(frame if type(frame) is list else [frame])


def row(index: int, frames: int, arena: str = "fe0-asr") -> Row:
    return Row(arena, index, (80, frames))


async def settle():
    for _ in range(5):
        await asyncio.sleep(0.01)


def test_batches_rt_rows_and_expiry():
    async def main():
        pool = StandInPool()
        batcher = make_batcher("preba", {"cpu0": "cpu"}, lambda *a: 0.01, policies=POLICY)
        dispatcher = Dispatcher(PLANS, pool, batcher, Metrics(), LatencyModel(), {"cpu0": "cpu"})
        dispatcher.start()
        fe0, fe1 = Writer(), Writer()
        far = dispatcher.now() + 60
        # two BE rows from two front ends: one batch of 2, padded to the 5 s bucket (501 frames)
        dispatcher.submit(FrontEndLink(fe0), Submit(AUDIO.key, Priority.BE, far, (row(0, 100),)))
        dispatcher.submit(FrontEndLink(fe1), Submit(AUDIO.key, Priority.BE, far, (row(3, 400, "fe1-asr"),)))
        await settle()
        [(vgpu, model, rows, length, priority, future)] = pool.batches
        assert (vgpu, model, length, priority) == ("cpu0", AUDIO.key, 501, Priority.BE)
        assert [r.index for r in rows] == [0, 3]
        # three RT rows go out at once, in chunks of the largest batch, padded to their own bucket
        dispatcher.submit(FrontEndLink(fe0), Submit(AUDIO.key, Priority.RT, far, (row(1, 50), row(2, 60), row(4, 70))))
        await settle()
        rt = pool.batches[1:]
        assert [(len(b[2]), b[3], b[4]) for b in rt] == [(2, 251, Priority.RT), (1, 251, Priority.RT)]
        future.set_result(([("out", "<f4", (1,), 0)], [("out", "<f4", (2,), 0)]))
        for b in rt:
            b[5].set_result(tuple([("out", "<f4", (1,), 0)] for _ in b[2]))
        await settle()
        assert [type(m) for m in fe1.messages] == [Done]
        assert fe1.messages[0].rows == (row(3, 400, "fe1-asr"),) and fe1.messages[0].layouts == ([("out", "<f4", (2,), 0)],)
        assert sorted(r.index for m in fe0.messages for r in m.rows) == [0, 1, 2, 4]
        # an expired row is answered without running; one longer than every bucket is rejected
        dispatcher.submit(FrontEndLink(fe0), Submit(AUDIO.key, Priority.BE, dispatcher.now() - 1, (row(5, 10),)))
        dispatcher.submit(FrontEndLink(fe0), Submit(AUDIO.key, Priority.BE, far, (row(6, lengths.frames(9.0)),)))
        await settle()
        assert len(pool.batches) == 3
        failures = {m.rows[0].index: m.failure for m in fe0.messages[-2:]}
        assert failures == {5: Failure.EXPIRED, 6: Failure.REJECTED}
        await dispatcher.stop()

    asyncio.run(main())


def test_a_failed_batch_answers_every_row_and_program_builds_are_counted():
    async def main():
        pool = StandInPool()
        batcher = make_batcher("preba", {"cpu0": "cpu"}, lambda *a: 0.01, policies=POLICY)
        metrics = Metrics()
        dispatcher = Dispatcher(PLANS, pool, batcher, metrics, LatencyModel(), {"cpu0": "cpu"})
        dispatcher.start()
        fe0 = Writer()
        far = dispatcher.now() + 60
        dispatcher.submit(FrontEndLink(fe0), Submit(AUDIO.key, Priority.BE, far, (row(0, 100), row(1, 120))))
        await settle()
        pool.batches[0][5].set_exception(RuntimeError("vGPU on fire"))
        await settle()
        [done] = fe0.messages
        assert done.failure == Failure.BACKEND and "on fire" in done.reason and len(done.rows) == 2
        dispatcher.submit(FrontEndLink(fe0), Submit(AUDIO.key, Priority.RT, far, (row(2, 100),)))
        await settle()
        pool.workers["cpu0"].program_builds = 1  # the worker built a shape it was not loaded with
        pool.batches[1][5].set_result(([],))
        await settle()
        assert b'atoll_program_builds_total{vgpu="cpu0"} 1.0' in metrics.render()
        await dispatcher.stop()

    asyncio.run(main())


def _patient_dispatcher(pool):
    batcher = make_batcher("preba", {"cpu0": "cpu"}, lambda *a: 0.01, policies=PATIENT)
    dispatcher = Dispatcher(PLANS, pool, batcher, Metrics(), LatencyModel(), {"cpu0": "cpu"})
    dispatcher.start()
    return dispatcher


def test_cancelled_rows_leave_the_queue_unexecuted_and_late_cancels_change_nothing():
    async def main():
        pool = StandInPool()
        dispatcher = _patient_dispatcher(pool)
        fe0 = Writer()
        link, far = FrontEndLink(fe0), dispatcher.now() + 60
        dispatcher.submit(link, Submit(AUDIO.key, Priority.BE, far, (row(0, 100),)))
        dispatcher.cancel(Cancel((row(0, 100),)))  # its request gave up while it was queued
        dispatcher.submit(link, Submit(AUDIO.key, Priority.BE, far, (row(1, 100), row(2, 100))))
        await settle()
        [first] = pool.batches  # rows 0 and 1 formed the batch; row 0 did not go
        assert [r.index for r in first[2]] == [1]
        [cancelled] = fe0.messages
        assert cancelled.failure == Failure.CANCELLED and cancelled.rows == (row(0, 100),)
        # a cancel for a row already sent (its answer is on its way) is ignored, and leaves nothing
        # behind that could drop the slot's next row
        dispatcher.cancel(Cancel((row(1, 100),)))
        first[5].set_result(([],))
        await settle()
        dispatcher.submit(link, Submit(AUDIO.key, Priority.BE, far, (row(1, 100),)))
        await settle()
        assert [r.index for r in pool.batches[1][2]] == [2, 1]
        assert link.outstanding == {("fe0-asr", 2), ("fe0-asr", 1)}
        pool.batches[1][5].set_result(([], []))
        await dispatcher.stop()

    asyncio.run(main())


def test_a_dead_front_ends_rows_are_dropped_and_its_successor_hears_of_the_running_ones():
    async def main():
        pool = StandInPool()
        dispatcher = _patient_dispatcher(pool)
        old, new = Writer(), Writer()
        link, far = FrontEndLink(old), dispatcher.now() + 60
        dispatcher.submit(link, Submit(AUDIO.key, Priority.BE, far, (row(0, 100), row(1, 100), row(2, 100))))
        await settle()
        [running] = pool.batches  # rows 0 and 1 run; row 2 waits for a partner
        held = dispatcher.forget(link)  # the front end died
        link.writer = new
        assert held == {("fe0-asr", 0), ("fe0-asr", 1), ("fe0-asr", 2)}
        running[5].set_result(([], []))
        dispatcher.submit(FrontEndLink(Writer()), Submit(AUDIO.key, Priority.BE, far, (row(7, 100, "fe1-asr"),)))
        await settle()
        assert [r.index for r in pool.batches[1][2]] == [7]  # row 2 was dropped, not run
        answered = {r.index: m.failure for m in new.messages for r in m.rows}
        assert answered == {0: None, 1: None, 2: Failure.CANCELLED} and not old.messages
        assert not link.outstanding
        pool.batches[1][5].set_result(([],))
        await dispatcher.stop()

    asyncio.run(main())


def test_models_added_and_removed_while_it_runs():
    async def main():
        pool = StandInPool()
        batcher = make_batcher("preba", {"cpu0": "cpu"}, lambda *a: 0.01)
        dispatcher = Dispatcher({}, pool, batcher, Metrics(), LatencyModel(), {"cpu0": "cpu"})
        dispatcher.start()
        fe0 = Writer()
        far = dispatcher.now() + 60
        dispatcher.submit(FrontEndLink(fe0), Submit(AUDIO.key, Priority.BE, far, (row(0, 100),)))
        await settle()
        assert fe0.messages[-1].failure == Failure.REJECTED  # not served yet
        dispatcher.add_model(AUDIO, ModelSettings(POLICY[AUDIO.key], TritonConfig(2)))
        dispatcher.submit(FrontEndLink(fe0), Submit(AUDIO.key, Priority.BE, far, (row(1, 100), row(2, 100))))
        await settle()
        [(_, model, rows, _, _, future)] = pool.batches
        assert model == AUDIO.key and len(rows) == 2
        future.set_result(([], []))
        await settle()
        dispatcher.remove_model(AUDIO.key)
        dispatcher.submit(FrontEndLink(fe0), Submit(AUDIO.key, Priority.RT, far, (row(3, 100),)))
        await settle()
        assert fe0.messages[-1].failure == Failure.REJECTED and len(pool.batches) == 1
        await dispatcher.stop()

    asyncio.run(main())


def test_a_model_batched_unpadded_runs_a_batch_per_shape():
    async def main():
        pool = StandInPool()
        plan = ModelPlan("bert", "1", max_batch=4, frame_axis=None, equal_shapes=True)
        batcher = make_batcher("preba", {"cpu0": "cpu"}, lambda *a: 0.01,
                               policies={plan.key: ModelBatching("image", (BucketPolicy(float("inf"), 4, 0.001),))})
        dispatcher = Dispatcher({plan.key: plan}, pool, batcher, Metrics(), LatencyModel(), {"cpu0": "cpu"})
        dispatcher.start()
        fe0 = Writer()
        rows = [Row("fe0-bert", i, (n,), ((n,), (n,))) for i, n in enumerate((7, 9, 7, 9))]
        dispatcher.submit(FrontEndLink(fe0), Submit(plan.key, Priority.RT, dispatcher.now() + 60, tuple(rows)))
        batches = [(b[2], b[3]) for b in pool.batches]  # sent at once: real-time rows skip the batcher
        assert batches == [((rows[0], rows[2]), None), ((rows[1], rows[3]), None)]
        for b in pool.batches:
            b[5].set_result(tuple([("y", "<f4", (1,), 0)] for _ in b[2]))
        await settle()
        assert sorted(r.index for m in fe0.messages for r in m.rows) == [0, 1, 2, 3]
        assert all(m.failure is None for m in fe0.messages)
        await dispatcher.stop()

    asyncio.run(main())
