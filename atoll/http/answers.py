"""A connection's answers, in the order its requests came (`edge.Connection`): one task runs each
request's handler in turn and writes its answer before the next runs, so pipelined requests wait
their turn. Past `MAX_QUEUED` whole requests waiting, the connection stops reading; a full write
buffer holds the next answer back; a 503 goes out at the server's refusal pace (`refusal_pace`)."""

from __future__ import annotations

import asyncio
from collections import deque

from atoll.http.messages import HttpRequest, HttpResponse

MAX_QUEUED = 16  # whole requests waiting behind the one in hand before the connection stops reading


class Answers:
    """The answers of `connection` (an `edge.Connection`): requests to answer, and responses given
    already: early (the connection kept) or a refusal (the last: the connection closes after it)."""

    def __init__(self, connection):
        self._connection = connection
        self._queue: deque[tuple[HttpRequest | HttpResponse, bool]] = deque()  # (item, keep_alive)
        self._task: asyncio.Task | None = None
        self._paused = False  # reading paused: `MAX_QUEUED` requests wait
        self._drained: asyncio.Future | None = None  # while the transport's write buffer is full

    @property
    def busy(self) -> bool:
        """A whole request in hand or waiting, or an answer waiting its turn."""
        return self._task is not None or bool(self._queue)

    @property
    def running(self) -> bool:
        return self._task is not None

    def request(self, request: HttpRequest) -> None:
        """Answer `request`, whole, after those before it."""
        self._queue.append((request, request.keep_alive))
        transport = self._connection.transport
        if len(self._queue) >= MAX_QUEUED and not self._paused and transport is not None:
            self._paused = True
            transport.pause_reading()
        self._start()

    def response(self, response: HttpResponse, keep_alive: bool) -> None:
        """Send `response` after the answers before it; not `keep_alive`: the last, a refusal."""
        self._queue.append((response, keep_alive))
        self._start()

    def early(self, response: HttpResponse, with_body: bool) -> None:
        """`response`, given before its request's body has arrived: sent now if nothing is before it
        and the pace allows, else at its turn."""
        if not self.busy and self._goes_now(response):
            self._write(response, True, with_body)
        else:
            self.response(response, True)

    def cancel(self) -> None:
        """The connection is gone: nothing more is answered, and what waits gives back its budget."""
        if self._task is not None:
            self._task.cancel()
        limits = self._connection.server.limits
        for item, _ in self._queue:
            if isinstance(item, HttpRequest):
                limits.release(item)
        self._queue.clear()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        connection = self._connection
        server = connection.server
        try:
            while self._queue:
                item, keep_alive = self._queue.popleft()
                if self._paused and len(self._queue) < MAX_QUEUED // 2 and connection.transport is not None:
                    self._paused = False
                    connection.transport.resume_reading()
                if isinstance(item, HttpResponse):  # answered early, or a refusal: then the last
                    await self._turn(item)
                    self._write(item, keep_alive, True)
                    if not keep_alive:
                        connection.linger()
                        return
                    continue
                request = item
                try:
                    response = await server.answer(request)
                finally:
                    server.limits.release(request)
                await self._turn(response)
                if not connection.open:
                    return
                keep_alive = keep_alive and not (connection.ended and not self._queue)
                self._write(response, keep_alive, request.method != "HEAD")
                if not keep_alive:
                    connection.close()
                    return
                if self._drained is not None:
                    await self._drained
        finally:
            self._task = None
        connection.answered()

    def _goes_now(self, response: HttpResponse) -> bool:
        """Whether `response` may be sent at once: anything but a 503 may, a 503 within the pace."""
        pace = self._connection.server.pace
        return pace is None or response.status != 503 or pace.free(asyncio.get_running_loop().time())

    async def _turn(self, response: HttpResponse) -> None:
        """Wait until `response` may be sent (`refusal_pace`)."""
        pace = self._connection.server.pace
        if pace is not None and response.status == 503:
            await pace.turn()

    def _write(self, response: HttpResponse, keep_alive: bool, with_body: bool) -> None:
        if self._connection.open:
            self._connection.transport.write(response.encode(keep_alive, with_body))
