"""A front end's native intake (native/intake.c) of KServe v2 infer requests over HTTP: C threads
read each request's head and body, so the event loop handles no socket, head or body of an infer
request. The loop is woken once for every request queued meanwhile, takes them in one call and runs
each through the same handler as the Python edge (`HttpServer.answer`: admission, decoding, the
request's timeout, errors as Triton answers them), then hands the answer back in one call, which
writes it to the socket (the rest of a longer one is the connection's thread's to write). What the intake does not take whole (every other route, chunked or encoded
bodies, a restricted call without its header, a stalled head or body, connections past
INTAKE_CONNECTIONS, bodies past the budget) it hands on, with the bytes already read, to the front
end's Python edge, which answers it as it always did. A client that goes away cancels its request,
as on the edge. The edge's bound on connections (`HttpConnections`, `server.max_connections`)
covers the intake's too: each is listed there while it lives (`_Held`), and may be closed to make
room as the edge's own are.

The intake is built with the system C compiler on first use and cached by content under
build/intake/ (`gpu_runtime.native`); without a compiler the front end serves every request on its
event loop, as with `server.http_intake=python`. Figures: docs/benchmarks.md, "a front end's native
intake".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from pathlib import Path
from types import ModuleType

from atoll.http.edge import HttpServer
from atoll.http.messages import HttpRequest
from atoll.kserve.protocol import HEADER_LENGTH
from atoll.kserve.restricted import Rule
from gpu_runtime.native import extension_module

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("native") / "intake.c"
HTTP1 = Path(__file__).parents[1] / "http" / "native" / "http1.h"
INTAKE_CONNECTIONS = 1024  # client connections the intake holds, a thread each (256 KB of stack); past it the edge's
INTAKE_UNBUDGETED = 1 << 62  # an edge with no body budget: nor has the intake
STOP_POLL_S = 0.02  # how often a stopping intake looks whether its connections are all closed
FORCED_WAIT_S = 5.0  # how long, once its connections are shut, it waits for their threads
_HEADER_LENGTH = HEADER_LENGTH.lower()


def native_module() -> ModuleType:
    """The compiled intake (`NativeBuildError` without a compiler or Python's headers)."""
    return extension_module([SOURCE, HTTP1], "_intake", "intake")


class NativeIntake:
    """Takes the infer requests arriving on `socks` (listening: the HTTP port, and its local twin
    where there is one) for `edge`, the front end's HTTP server (its routes, limits, connections
    and refusal pace), and hands everything else to it;
    `rule` is the infer route's restriction (None: none). Bodies held at once share the edge's
    budget (`BodyBudget`, `server.body_memory_bytes`): the intake holds at most what leaves one
    largest request to the edge, and the edge counts what the intake holds."""

    def __init__(self, edge: HttpServer, socks: tuple[socket.socket, ...], rule: Rule | None):
        self._edge = edge
        self._socks = socks
        for sock in socks:  # polled together: an accept must not wait (its connection gone meanwhile) on one
            sock.setblocking(False)
        self._loop = asyncio.get_running_loop()
        # a restricted infer route checks its header again in Python: the intake took only requests carrying it
        self._headers = {} if rule is None else {rule.key: rule.value}
        # the infer route's handler, unversioned and versioned: the intake parsed the path already
        self._handlers = {versioned: edge.routes.resolve(HttpRequest("POST", path, "", {}))
                          for versioned, path in ((False, "/v2/models/m/infer"),
                                                  (True, "/v2/models/m/versions/1/infer"))}  # fmt: skip
        self._running: dict[tuple[int, int], asyncio.Task] = {}
        self._held: dict[tuple[int, int], _Held] = {}
        self._stopping = False
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        limits = edge.limits
        budget = limits.budget.total - limits.max_bytes if limits.budget is not None else INTAKE_UNBUDGETED
        self._native = native_module().Intake(
            listen_fds=tuple(sock.fileno() for sock in socks), wake_fd=self._wake, handoff=self._handoff,
            opened=self._opened, closed=self._closed, rule=None if rule is None else (rule.key, rule.value),
            max_body=limits.max_bytes, budget=budget, idle_s=edge.idle_timeout_s, stall_s=limits.timeout_s,
            max_connections=INTAKE_CONNECTIONS)  # fmt: skip
        if limits.budget is not None:
            limits.budget.elsewhere = self._native.held
        self._loop.add_reader(self._wake, self._arrived)
        self._native.start()

    def counts(self) -> dict[str, int]:
        """Requests answered, connections handed to the edge, body bytes held, connections live."""
        return self._native.counts()

    async def stop(self, drain_s: float) -> None:
        """Accept no more and close idle connections; answer what is in hand for up to `drain_s`,
        then shut every connection (what is still running is cancelled). Once."""
        if self._stopping:
            return
        self._stopping = True
        self._native.stop_accepting()
        for wait_s in (drain_s, FORCED_WAIT_S):
            deadline = self._loop.time() + wait_s
            while self._native.live() and self._loop.time() < deadline:
                await asyncio.sleep(STOP_POLL_S)
            self._native.force()
        self._loop.remove_reader(self._wake)
        os.close(self._wake)
        for sock in self._socks:
            sock.close()
        if not self._native.close():
            log.warning("%d intake thread(s) still running at stop", self._native.live())

    # -- on the loop ----------------------------------------------------------------------------------

    def _arrived(self) -> None:
        for slot, serial, model, version, json_length, body, close in self._native.take():
            key = (slot, serial)
            if model is None:  # its client went away
                if (task := self._running.get(key)) is not None:
                    task.cancel()
                    task.add_done_callback(lambda _, key=key: self._given_up(key))  # (one not yet started)
                continue
            self._running[key] = self._loop.create_task(self._answer(key, model, version, json_length, body, close))

    async def _answer(self, key: tuple[int, int], model: str, version: str | None, json_length: int | None, body,
                      close: bool) -> None:  # fmt: skip
        edge = self._edge
        path = f"/v2/models/{model}/infer" if version is None else f"/v2/models/{model}/versions/{version}/infer"
        headers = self._headers if json_length is None else {**self._headers, _HEADER_LENGTH: str(json_length)}
        request = HttpRequest("POST", path, "", headers)
        request.params = {"model": model} if version is None else {"model": model, "version": version}
        request.handler = self._handlers[version is not None]
        request.body = body if type(body) is bytes else memoryview(body)  # (a binary request's, not copied)
        request.keep_alive = not close
        data = None
        try:
            response = await edge.answer(request)
            if response.status == 503 and edge.pace is not None:
                await edge.pace.turn()
            data = response.encode(request.keep_alive and not self._stopping)
        except asyncio.CancelledError:  # the client went away: its connection closes
            pass
        finally:
            edge.limits.release(request)
            self._running.pop(key, None)
            self._native.answer(*key, data, not request.keep_alive or self._stopping)

    def _given_up(self, key: tuple[int, int]) -> None:
        """A cancelled request's thread is told, where its task was cancelled before it began (its
        `finally` never ran): no answer, the connection closes. A second word is ignored."""
        self._running.pop(key, None)
        self._native.answer(*key, None, True)

    def _handoff(self, fd: int, prefix: bytes) -> None:
        """The connection on `fd` is the edge's from now on, `prefix` what the intake read of it
        (called from an intake thread, under the GIL)."""
        try:
            self._loop.call_soon_threadsafe(self._adopt, fd, prefix)
        except RuntimeError:  # the loop has closed: the front end is gone
            os.close(fd)

    def _adopt(self, fd: int, prefix: bytes) -> None:
        self._edge.adopt(socket.socket(fileno=fd), prefix)

    def _opened(self, slot: int, id_: int) -> None:
        """A connection was accepted (called from the accepting thread, under the GIL, in order)."""
        with contextlib.suppress(RuntimeError):  # the loop has closed: the front end is gone
            self._loop.call_soon_threadsafe(self._listed, slot, id_)

    def _closed(self, slot: int, id_: int) -> None:
        """A connection's thread ends (called from it, under the GIL); after its `_opened`."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._unlisted, slot, id_)

    def _listed(self, slot: int, id_: int) -> None:
        self._held[slot, id_] = held = _Held(self._native, slot, id_)
        self._edge.connections.add(held)

    def _unlisted(self, slot: int, id_: int) -> None:
        if (held := self._held.pop((slot, id_), None)) is not None:
            self._edge.connections.discard(held)


class _Held:
    """A connection the intake holds, as the edge's `HttpConnections` sees one of its own."""

    __slots__ = ("_native", "_slot", "_id")

    def __init__(self, native, slot: int, id_: int):
        self._native, self._slot, self._id = native, slot, id_

    @property
    def holds_request(self) -> bool:
        return self._native.connection(self._slot, self._id, False) == "holds"

    @property
    def receiving_body(self) -> bool:
        return self._native.connection(self._slot, self._id, False) == "arriving"

    def abort(self) -> None:
        self._native.connection(self._slot, self._id, True)
