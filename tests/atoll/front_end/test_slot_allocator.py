"""A front end's slots: last in first out, a reserve only real-time rows may take, and requests that
find too few slots wait for them, real-time ones first."""

from __future__ import annotations

import asyncio
import secrets

import pytest
from gpu_runtime.priority import Priority
from gpu_runtime.vgpu.slots import SlotArena

from atoll.front_end.slots import SlotAllocator


@pytest.fixture
def slots():
    arena = SlotArena.create(f"atoll-test-{secrets.token_hex(4)}", 4, 64, 64)
    yield SlotAllocator(arena, rt_reserve=1)
    arena.close()


def test_lifo_and_the_real_time_reserve(slots):
    async def main():
        a = await slots.acquire(2, Priority.BE)
        slots.release(a)
        assert await slots.acquire(2, Priority.BE) == a  # the same, still mapped and warm
        assert slots.most(Priority.BE) == 3 and slots.most(Priority.RT) == 4
        b = await slots.acquire(1, Priority.BE)
        assert slots.free == 1
        rt = await slots.acquire(1, Priority.RT)  # the reserve: RT only
        assert slots.free == 0 and set(a + b + rt) == {0, 1, 2, 3}
        with pytest.raises(ValueError, match="cannot fit"):
            await slots.acquire(4, Priority.BE)

    asyncio.run(main())


def test_waiting_requests_are_served_real_time_first(slots):
    async def main():
        held = await slots.acquire(3, Priority.BE)
        held += await slots.acquire(1, Priority.RT)
        be = asyncio.create_task(slots.acquire(1, Priority.BE))
        await asyncio.sleep(0)
        rt = asyncio.create_task(slots.acquire(1, Priority.RT))
        await asyncio.sleep(0)
        slots.release(held[:1])
        assert len(await rt) == 1 and not be.done()  # the RT request came later but goes first
        slots.release(held[1:2])
        await asyncio.sleep(0)
        assert not be.done()  # one free slot is the reserve
        slots.release(held[2:3])
        assert len(await be) == 1

    asyncio.run(main())


def test_a_request_that_gives_up_waiting_takes_nothing(slots):
    async def main():
        held = await slots.acquire(3, Priority.BE)
        waiter = asyncio.create_task(slots.acquire(2, Priority.BE))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        slots.release(held)
        assert slots.free == 4

    asyncio.run(main())
