"""The channel between front ends and the dispatcher coalesces: messages sent in one round of the
event loop travel as one frame, an urgent (real-time) one goes at once behind those waiting, and the
reader hands over every whole frame a read brought, in order, whatever the reads' boundaries; the
supervisor keeps a frame's Submits and Cancels in order."""

from __future__ import annotations

import asyncio
import pickle
import socket

from gpu_runtime.priority import Priority
from gpu_runtime.vgpu.messages import Row
from tests.atoll.supervisor.test_dispatcher import AUDIO, StandInPool, _patient_dispatcher, row

from atoll.supervisor.front_ends import FrontEndSupervisor
from atoll.wire import channel
from atoll.wire.channel import Cancel, Done, Outbox, Submit


class Frames:
    """A writer that keeps each frame written, unpickled."""

    def __init__(self):
        self.frames = []

    def is_closing(self):
        return False

    def write(self, data: bytes):
        self.frames.append(pickle.loads(data[4:]))


def submit(index: int, priority: Priority = Priority.BE) -> Submit:
    return Submit("m", priority, 1e9, (Row("a", index, (3,)),))


def test_one_frame_per_loop_round_and_urgent_messages_at_once():
    async def main():
        writer = Frames()
        outbox = Outbox(writer)
        outbox.send(submit(0))
        outbox.send(submit(1))
        assert writer.frames == []  # not before the round ends
        await asyncio.sleep(0)
        assert writer.frames == [[submit(0), submit(1)]]
        outbox.send(submit(2))
        outbox.send(submit(3, Priority.RT), urgent=True)  # at once, behind the one waiting
        assert writer.frames[1:] == [[submit(2), submit(3, Priority.RT)]]
        outbox.send(Cancel((Row("a", 2, (3,)),)))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert writer.frames[2:] == [Cancel((Row("a", 2, (3,)),))]  # a lone message, unwrapped

    asyncio.run(main())


def test_a_new_writer_gets_what_waited_for_the_old_one():
    async def main():
        old, new = Frames(), Frames()
        outbox = Outbox(old)
        outbox.send(Done((Row("a", 0, (3,)),)))
        outbox.writer = new  # a restarted front end took the channel over
        await asyncio.sleep(0)
        assert old.frames == [] and new.frames == [Done((Row("a", 0, (3,)),))]

    asyncio.run(main())


def test_the_reader_hands_over_whole_frames_across_any_read_boundaries():
    async def main():
        ours, theirs = socket.socketpair()
        received = []
        transport, frames = await channel.connect(ours, received.append)
        messages = [submit(i) for i in range(5)]
        data = b"".join([channel.encode(messages[0]), channel.encode(messages[1:4]), channel.encode(messages[4])])
        theirs.sendall(data[:3])  # not even a whole length
        await asyncio.sleep(0.05)
        theirs.sendall(data[3:-7])  # the last frame cut short
        await asyncio.sleep(0.05)
        assert received == [messages[:4]]
        theirs.sendall(data[-7:])
        await asyncio.sleep(0.05)
        assert received == [messages[:4], messages[4:]]
        theirs.close()
        await asyncio.wait_for(frames.closed, 5)
        transport.close()

    asyncio.run(main())


def test_a_cancel_in_the_same_frame_as_its_submit_drops_the_row():
    """The supervisor hands a frame's Submits to the dispatcher together, but in order with the
    Cancels between them, so a request that gave up right after submitting is still dropped."""

    async def main():
        pool = StandInPool()
        dispatcher = _patient_dispatcher(pool)
        front_end = FrontEndSupervisor(0, None, dispatcher, None, frozenset, lambda *a: None, lambda i: None)
        frames, theirs, held = await front_end._connect()  # the channel a front end process would get
        far = dispatcher.now() + 60
        first = Submit(AUDIO.key, Priority.BE, far, (row(0, 100),))
        then = Submit(AUDIO.key, Priority.BE, far, (row(1, 100), row(2, 100)))
        theirs.sendall(channel.encode([first, Cancel((row(0, 100),)), then]))
        for _ in range(50):
            if pool.batches:
                break
            await asyncio.sleep(0.01)
        [batch] = pool.batches  # rows 0 and 1 formed the batch; row 0 did not go
        assert [r.index for r in batch[2]] == [1] and held == frozenset()
        batch[5].set_result(([],))
        theirs.close()
        await asyncio.wait_for(frames.closed, 5)
        await dispatcher.stop()

    asyncio.run(main())
