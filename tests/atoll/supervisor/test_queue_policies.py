"""The dispatcher applies a model's queue policies (Triton's batcher.md, "Queue Policy"): a request
finding `max_queue_size` queued is refused at once, one that waited past its timeout is answered
"Request timeout expired" (REJECT) or waits behind the others (DELAY)."""

from __future__ import annotations

import asyncio

from batching import BucketPolicy, ModelBatching, make_batcher
from batching.queue_policy import QueuePolicies, QueuePolicy
from gpu_runtime.priority import Priority
from tests.atoll.supervisor.test_dispatcher import StandInPool, Writer, row, settle

from atoll.observe.metrics import Metrics
from atoll.supervisor.dispatcher import Dispatcher, FrontEndLink, ModelPlan
from atoll.supervisor.latency_model import LatencyModel
from atoll.wire.channel import Failure, Submit


async def until(condition, limit_s: float = 10.0):
    """Wait for `condition` (the batcher's timers run on this loop), failing after `limit_s`."""
    for _ in range(int(limit_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition did not come true")


def _dispatcher(policy: QueuePolicy, wait_s: float = 3600.0):
    plan = ModelPlan("m", "1", max_batch=4, frame_axis=None, queues=QueuePolicies(default=policy))
    policies = {plan.key: ModelBatching("image", (BucketPolicy(float("inf"), 4, wait_s),))}
    pool = StandInPool()
    batcher = make_batcher("preba", {"cpu0": "cpu"}, lambda *a: 0.01, policies=policies)
    return plan, pool, Dispatcher({plan.key: plan}, pool, batcher, Metrics(), LatencyModel(), {"cpu0": "cpu"})


def test_a_full_queue_refuses_at_once():
    async def main():
        plan, pool, dispatcher = _dispatcher(QueuePolicy(max_queue_size=2))
        dispatcher.start()
        fe, far = Writer(), dispatcher.now() + 60
        for i in range(3):
            dispatcher.submit(FrontEndLink(fe), Submit(plan.key, Priority.BE, far, (row(i, 1, "fe0-m"),)))
        await settle()
        [refused] = fe.messages
        assert refused.failure == Failure.QUEUE_FULL and refused.reason == "Exceeds maximum queue size"
        assert [r.index for r in refused.rows] == [2] and not pool.batches  # the two others wait on
        dispatcher.submit(FrontEndLink(fe), Submit(plan.key, Priority.RT, far, (row(3, 1, "fe0-m"),)))
        assert len(pool.batches) == 1  # real-time rows never queue
        await dispatcher.stop(0.01)

    asyncio.run(main())


def test_reject_answers_a_timed_out_request_and_runs_the_rest():
    async def main():
        plan, pool, dispatcher = _dispatcher(QueuePolicy(allow_timeout_override=True), wait_s=0.05)
        dispatcher.start()
        fe, far = Writer(), dispatcher.now() + 60
        dispatcher.submit(FrontEndLink(fe), Submit(plan.key, Priority.BE, far, (row(0, 1, "fe0-m"),), 0, 1000))
        dispatcher.submit(FrontEndLink(fe), Submit(plan.key, Priority.BE, far, (row(1, 1, "fe0-m"),)))
        await until(lambda: pool.batches)  # the batch forms after 50 ms, past the first one's 1 ms
        [timed_out] = fe.messages
        assert timed_out.failure == Failure.QUEUE_TIMEOUT and timed_out.reason == "Request timeout expired"
        [(_, _, rows, _, _, future)] = pool.batches
        assert [r.index for r in rows] == [1]
        future.set_result(([],))
        await settle()
        await dispatcher.stop(0.01)

    asyncio.run(main())


def test_delay_runs_a_timed_out_request_behind_the_others():
    async def main():
        plan, pool, dispatcher = _dispatcher(QueuePolicy("DELAY", allow_timeout_override=True), wait_s=0.05)
        dispatcher.start()
        fe, far = Writer(), dispatcher.now() + 60
        dispatcher.submit(FrontEndLink(fe), Submit(plan.key, Priority.BE, far, (row(0, 1, "fe0-m"),), 0, 1000))
        dispatcher.submit(FrontEndLink(fe), Submit(plan.key, Priority.BE, far, (row(1, 1, "fe0-m"),)))
        await until(lambda: pool.batches)
        [(_, _, rows, _, _, future)] = pool.batches
        assert [r.index for r in rows] == [1] and not fe.messages  # the timed-out one is not refused
        future.set_result(([],))
        await until(lambda: len(pool.batches) == 2)
        assert [[r.index for r in b[2]] for b in pool.batches] == [[1], [0]]  # it ran next
        pool.batches[1][5].set_result(([],))
        await settle()
        assert [m.failure for m in fe.messages] == [None, None]
        await dispatcher.stop(0.01)

    asyncio.run(main())
