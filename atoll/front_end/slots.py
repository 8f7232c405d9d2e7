"""A front end's slots of one model (`gpu_runtime.vgpu.slots.SlotArena`), handed out to requests.

Free slots go last-in first-out, so the few in use stay mapped and warm in every process that
touches them. `rt_reserve` slots are only ever given to real-time rows, so best-effort load cannot
take the last ones. A request that finds too few free waits for them, real-time requests first,
instead of failing; its timeout bounds the wait.
"""

from __future__ import annotations

import asyncio
from collections import deque

from gpu_runtime.priority import Priority
from gpu_runtime.vgpu.slots import SlotArena


class SlotAllocator:
    def __init__(self, arena: SlotArena, rt_reserve: int):
        if not 0 <= rt_reserve < arena.count:
            raise ValueError(f"{arena.count} slots cannot keep {rt_reserve} for real-time rows")
        self.arena = arena
        self.rt_reserve = rt_reserve
        self._free = list(range(arena.count - 1, -1, -1))
        self._waiting = {priority: deque() for priority in Priority}

    @property
    def free(self) -> int:
        return len(self._free)

    def most(self, priority: Priority) -> int:
        """The most slots one request of `priority` can ever hold."""
        return self.arena.count - (0 if priority == Priority.RT else self.rt_reserve)

    def hold(self, index: int) -> None:
        """Take slot `index` out of use until it is released (before any request is served)."""
        self._free.remove(index)

    async def acquire(self, n: int, priority: Priority) -> list[int]:
        if not 0 < n <= self.most(priority):
            raise ValueError(f"a request of {n} rows cannot fit the front end's "
                             f"{self.most(priority)} {priority} slots")  # fmt: skip
        if not any(self._waiting.values()) and self._fits(n, priority):
            return self._take(n)
        waiter = asyncio.get_running_loop().create_future()
        self._waiting[priority].append((n, waiter))
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())  # granted just as the request gave up
            raise

    def release(self, indices) -> None:
        self._free.extend(indices)
        for priority in Priority:  # RT first
            queue = self._waiting[priority]
            while queue and (queue[0][1].done() or self._fits(queue[0][0], priority)):
                n, waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(self._take(n))
            if queue:
                return  # the oldest waiter of this priority still does not fit: keep order

    def _fits(self, n: int, priority: Priority) -> bool:
        return len(self._free) - (0 if priority == Priority.RT else self.rt_reserve) >= n

    def _take(self, n: int) -> list[int]:
        taken = self._free[-n:]
        del self._free[-n:]
        return taken
