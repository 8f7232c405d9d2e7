"""Front-end processes kept alive: each is started, its channel served, and, when it dies, it is
started again (at once, or after a `Backoff` delay when it keeps dying; no lifetime budget).

The requests a dead front end held die with its connections (their clients see the connection
close). What it left at the dispatcher is dropped if still queued, and its successor takes over
its `FrontEndLink` and its slot arenas, holding the slots of rows a vGPU may still be writing
(`Dispatcher.forget`) until their answers arrive; it starts with the models and shared-memory
regions served now (`make_setup`). Every death is logged at WARNING and counted in
`atoll_worker_restarts_total{kind="front_end"}`. Submissions go to the dispatcher; every other
message (hello, control calls) to the service (`on_message`), and `on_gone` says a channel closed.
Once `stop` is called nothing is started again; a front end is started shielded from the stop
signals (`lifecycle.shielded`), so only the supervisor's `Stop` ends it.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import signal
import socket
import time
from collections.abc import Callable

from gpu_runtime.vgpu.backoff import Backoff
from prometheus_client.multiprocess import mark_process_dead

from atoll.front_end.process import front_end_main
from atoll.front_end.rows import FrontEndSetup
from atoll.supervisor.dispatcher import Dispatcher, FrontEndLink
from atoll.supervisor.lifecycle import shielded
from atoll.wire import channel
from atoll.wire.channel import Cancel, Health, Hello, Stop, Submit

log = logging.getLogger(__name__)
HELLO_TIMEOUT_S = 120.0  # a front end imports OpenCV, onnxruntime's neighbours and aiohttp first


class FrontEndSupervisor:
    def __init__(self, index: int, make_setup: Callable[[frozenset], FrontEndSetup], dispatcher: Dispatcher,
                 metrics, ready_models: Callable[[], frozenset[str]], on_message: Callable, on_gone: Callable):
        """`make_setup(held)`: the setup of the next incarnation; `on_message(index, writer,
        message)` and `on_gone(index)`: the service's side of the channel."""
        self.index = index
        self.make_setup = make_setup
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.ready_models = ready_models
        self.on_message = on_message
        self.on_gone = on_gone
        self.backoff = Backoff()
        self.link: FrontEndLink | None = None
        self.process = None
        self._ctx = multiprocessing.get_context("spawn")
        self._hello: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        self._stopping = False

    async def start(self) -> None:
        """Start the front end and wait until it listens."""
        self._hello = asyncio.get_running_loop().create_future()
        frames, theirs, _ = await self._connect()
        self._spawn(theirs, frozenset())
        self._task = asyncio.create_task(self._run(frames))
        try:
            await asyncio.wait_for(asyncio.shield(self._hello), HELLO_TIMEOUT_S)
        except TimeoutError:
            raise RuntimeError(f"front end {self.index} did not start within {HELLO_TIMEOUT_S:g} s") from None

    def send(self, message) -> None:
        if self.link is not None:  # none before it starts, whose channel opens with the news
            self.link.send(message)

    def stop(self) -> None:
        """Ask it to answer what it holds and exit (`join` waits for that); it is not started again."""
        self._stopping = True
        self.send(Stop())

    async def join(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for it to exit, then kill it."""
        if self.process is not None:
            await asyncio.to_thread(self.process.join, timeout_s)
            if self.process.is_alive():
                log.warning("front end %d (pid %d) did not exit within %g s of the stop; killing it", self.index,
                            self.process.pid, timeout_s)  # fmt: skip
                self.process.kill()
                await asyncio.to_thread(self.process.join)
        if self._task is not None:
            self._task.cancel()
        if self.link is not None:
            self.link.writer.close()

    # -- internals ------------------------------------------------------------------------------

    async def _connect(self):
        """A channel for the next incarnation: (our reading end, its socket, the slots it must hold)."""
        ours, theirs = socket.socketpair()
        writer, frames = await channel.connect(ours, self._received)
        held = frozenset()
        if self.link is None:
            self.link = FrontEndLink(writer)
        else:  # in one step with the switch, so no answer for the held rows goes to the dead one
            held = self.dispatcher.forget(self.link)
            self.link.writer.close()
            self.link.writer = writer
        self.link.send(Health(self.ready_models()), urgent=True)
        return frames, theirs, held

    def _spawn(self, theirs: socket.socket, held: frozenset) -> None:
        setup = self.make_setup(held)
        self.process = self._ctx.Process(target=front_end_main, args=(setup, theirs),
                                         name=f"atoll-fe{setup.index}", daemon=True)  # fmt: skip
        with shielded():
            self.process.start()
        theirs.close()
        self.backoff.started(time.monotonic())

    async def _run(self, frames: channel.Frames) -> None:
        index = self.index
        while True:
            await frames.closed
            self.on_gone(index)
            if self._stopping:
                return
            if not self._hello.done():
                self._hello.set_exception(RuntimeError(f"front end {index} exited during start-up (see its log)"))
                return
            await asyncio.to_thread(self.process.join)
            code, pid = self.process.exitcode, self.process.pid
            mark_process_dead(pid)  # its in-flight gauge no longer counts
            if self._stopping:  # the stop began while it died
                return
            delay = self.backoff.delay(time.monotonic())
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            log.warning("front end %d (pid %d) died, %s; restarting it%s", index, pid, how,
                        f" in {delay:.1f} s (it died again soon after its last start)" if delay else "")
            self.metrics.worker_restarts.labels("front_end").inc()
            frames, theirs, held = await self._connect()
            await asyncio.sleep(delay)
            if self._stopping:
                theirs.close()
                return
            self._spawn(theirs, held)

    def _received(self, messages: list) -> None:
        """Its messages that arrived together; its requests handed to the dispatcher together (it
        polls its batcher once for them)."""
        submits = []
        for message in messages:
            if type(message) is Submit:
                submits.append(message)
                continue
            if submits:  # in order: a Cancel may be for the rows just submitted
                self.dispatcher.submit_all(self.link, submits)
                submits = []
            self._other(message)
        if submits:
            self.dispatcher.submit_all(self.link, submits)

    def _other(self, message) -> None:
        """Anything but a Submit."""
        match message:
            case Cancel():
                self.dispatcher.cancel(message)
            case Hello(pid=pid):
                if not self._hello.done():
                    self._hello.set_result(pid)
                    log.info("front end %d listening (pid %d)", self.index, pid)
                else:
                    log.info("front end %d is back (pid %d)", self.index, pid)
                self.on_message(self.index, self.link.writer, message)
            case _:
                self.on_message(self.index, self.link.writer, message)
