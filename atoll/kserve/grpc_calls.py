"""What the two KServe v2 gRPC services (a front end's `front_end/grpc_service.py`, the cluster
endpoint's `cluster/grpc_proxy.py`) do alike with their calls: a bug answered without its traceback,
a stream's answers pumped with a bound on those unsent, and HTTP/2's window for a request's tensors.
"""

from __future__ import annotations

import asyncio
import logging

from atoll.kserve.errors import INTERNAL_ERROR

log = logging.getLogger(__name__)
STREAM_UNSENT = 64  # a stream's requests read and not yet answered to the client


def internal_message(exc: Exception, method: str) -> str:
    """A bug's message to the client, as HTTP's: its traceback goes to the log, not to the client."""
    log.error("%s failed", method, exc_info=exc)
    return INTERNAL_ERROR


async def stream_answers(request_iterator, one):
    """A stream's answers as they come, `await one(request)` each (it answers every request, never
    raises; an async iterator is several answers, a decoupled model's). At most STREAM_UNSENT requests are read ahead of the answers the client has taken: a
    client that sent 3,000 requests and read none grew a front end by 600 MB of answers waiting."""
    answers: asyncio.Queue = asyncio.Queue()
    running: set[asyncio.Task] = set()
    unsent = asyncio.Semaphore(STREAM_UNSENT)

    async def answer(msg) -> None:
        result = await one(msg)
        if not hasattr(result, "__aiter__"):
            answers.put_nowait(result)
            return
        taken = True  # several answers (a decoupled model's): each past the first takes a place too
        async for item in result:
            if not taken:
                await unsent.acquire()
            taken = False
            answers.put_nowait(item)
        if taken:  # none at all: its place is free
            unsent.release()

    async def read() -> None:
        try:
            while True:
                await unsent.acquire()
                try:
                    msg = await anext(request_iterator)
                except StopAsyncIteration:
                    break
                task = asyncio.create_task(answer(msg))
                running.add(task)
                task.add_done_callback(running.discard)
            await asyncio.gather(*running)
        finally:  # the stream ends, not hangs, if reading it fails
            answers.put_nowait(None)

    reader = asyncio.create_task(read())
    try:
        while (item := await answers.get()) is not None:
            yield item
            unsent.release()
        await reader  # reading's failure, if it failed, ends the call
    finally:
        reader.cancel()
        for task in running:
            task.cancel()


# HTTP/2's initial stream window (64 KB) makes a 600 KB tensor wait on ~10 window updates; 8 MB
# lets a request in at once (measured: docs/benchmarks.md).
STREAM_WINDOW_BYTES = 8 << 20
