"""The dispatcher carrying out a stateful model's sequence batcher (batching/sequence.py) over a
stand-in pool: each batch names its rows' sequences for the worker, a sequence's next request
waits for its previous one, and refusals reach the front end with Triton's words."""

from __future__ import annotations

import asyncio

from batching import ModelSettings, TritonConfig, image_model, make_batcher
from batching.sequence import SequenceSettings
from gpu_runtime.priority import Priority
from gpu_runtime.vgpu.messages import Row, RowSequence
from tests.atoll.supervisor.test_dispatcher import StandInPool, Writer, settle

from atoll.observe.metrics import Metrics
from atoll.supervisor.dispatcher import Dispatcher, FrontEndLink, ModelPlan
from atoll.supervisor.latency_model import LatencyModel
from atoll.wire.channel import Done, Failure, Submit

PLAN = ModelPlan("acc", "1", max_batch=4, frame_axis=None, equal_shapes=True, sequence=SequenceSettings("direct"))


def row(index: int) -> Row:
    return Row("fe0-acc", index, (1,))


def test_batches_name_their_sequences_and_a_sequence_runs_one_request_at_a_time():
    async def main():
        pool = StandInPool()
        dispatcher = Dispatcher({}, pool, make_batcher("preba", {"cpu0": "cpu"}, lambda *a: 0.01, policies={}),
                                Metrics(), LatencyModel(), {"cpu0": "cpu"})  # fmt: skip
        dispatcher.add_model(PLAN, ModelSettings(image_model(4, 0.001), TritonConfig(4, 0, ())))
        dispatcher.start()
        fe = Writer()
        link, far = FrontEndLink(fe), dispatcher.now() + 60

        def submit(index, sequence):
            dispatcher.submit(link, Submit(PLAN.key, Priority.BE, far, (row(index),), sequence=sequence))

        submit(0, RowSequence(7, start=True))  # goes at once (direct, no delay)
        submit(1, RowSequence("s", start=True))  # the vGPU runs a batch of the model: waits
        submit(2, RowSequence(7, end=True))
        submit(3, RowSequence(9))  # never started
        submit(4, None)  # no sequence ID
        await settle()
        assert [[r.index for r in b[2]] for b in pool.batches] == [[0]]
        assert pool.sequences == [((RowSequence(7, start=True),), ())]
        refusals = [(m.rows[0].index, m.failure, m.reason) for m in fe.messages if isinstance(m, Done)]
        assert refusals == [
            (3, Failure.REJECTED, "inference request for sequence 9 to model 'acc' must specify the START flag on "
                                  "the first request of the sequence"),
            (4, Failure.REJECTED, "inference request to model 'acc' must specify a non-zero or non-empty "
                                  "correlation ID")]  # fmt: skip
        pool.batches[0][5].set_result((None, None))
        await settle()
        # one batch of both sequences' next requests, in slot order (7 took slot 0)
        assert [[r.index for r in b[2]] for b in pool.batches] == [[0], [2, 1]]
        assert pool.sequences[1] == ((RowSequence(7, end=True), RowSequence("s", start=True)), ())

    asyncio.run(main())
