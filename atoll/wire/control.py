"""Calls between the front ends and the supervisor, over the channel each front end already has.

A front end asks (`SupervisorLink.ask`) what only the supervisor can answer: loading or unloading
a model, the repository index, registering a shared-memory region. To answer, the supervisor may
have every front end make a change first (`FrontEnds.apply`: attach a new model's slots, drain and
retire a model, map a region) and answers once all of them have, so whichever front end takes the
client's next request already sees it.
"""

from __future__ import annotations

import asyncio
import itertools

from atoll.kserve.errors import ApiError, ErrorCode
from atoll.wire import channel
from atoll.wire.channel import Applied, Apply, Control, Reply


class SupervisorLink:
    """A front end's side."""

    def __init__(self, writer: asyncio.WriteTransport):
        self.writer = writer
        self._ids = itertools.count()
        self._waiting: dict[int, asyncio.Future] = {}

    async def ask(self, action):
        """The supervisor's result for `action`; its ApiError raised here."""
        key = next(self._ids)
        future = self._waiting[key] = asyncio.get_running_loop().create_future()
        self.writer.write(channel.encode(Control(key, action)))
        try:
            reply = await future
        finally:
            self._waiting.pop(key, None)
        if reply.error is not None:
            raise reply.error
        return reply.result

    def answered(self, reply: Reply) -> None:
        future = self._waiting.get(reply.id)
        if future is not None and not future.done():
            future.set_result(reply)

    def gone(self) -> None:
        """The supervisor closed the channel: nothing waiting will be answered."""
        for future in self._waiting.values():
            if not future.done():
                future.set_result(Reply(-1, error=ApiError(ErrorCode.UNAVAILABLE, "the server is stopping")))


class FrontEnds:
    """The supervisor's side: every front end's channel, by front-end index."""

    def __init__(self):
        self.writers: dict[int, asyncio.WriteTransport] = {}
        self._ids = itertools.count()
        self._waiting: dict[int, dict[int, asyncio.Future]] = {}  # Apply id -> front end -> its answer

    async def apply(self, change) -> None:
        """Have every front end make `change`; raises the first front end's error, once all answered."""
        key = next(self._ids)
        loop = asyncio.get_running_loop()
        waiting = self._waiting[key] = {index: loop.create_future() for index in self.writers}
        for writer in self.writers.values():
            writer.write(channel.encode(Apply(key, change)))
        try:
            errors = await asyncio.gather(*waiting.values())
        finally:
            del self._waiting[key]
        for error in errors:
            if error is not None:
                raise error

    def applied(self, index: int, message: Applied) -> None:
        future = self._waiting.get(message.id, {}).get(index)
        if future is not None and not future.done():
            future.set_result(message.error)

    def gone(self, index: int) -> None:
        """Front end `index` exited: later changes skip it, those it was making fail."""
        self.writers.pop(index, None)
        for waiting in self._waiting.values():
            future = waiting.get(index)
            if future is not None and not future.done():
                future.set_result(ApiError(ErrorCode.INTERNAL, f"front end {index} exited"))


def reply(writer: asyncio.WriteTransport, message: Control, result=None, error: ApiError | None = None) -> None:
    if not writer.is_closing():
        writer.write(channel.encode(Reply(message.id, result, error)))
