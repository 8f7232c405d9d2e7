"""The channel between a front-end process and the dispatcher: typed messages over a Unix socket.

Each message is a frozen dataclass, pickled behind a 4-byte length. None carries a tensor: rows
travel as slot references (`gpu_runtime.vgpu.messages.Row`), outputs are left in the rows' slots.
The same socket carries the supervisor's control messages, so a front end has one thing to watch:
calls only the supervisor can answer (`Control`/`Reply`: model loads, the repository index,
shared-memory registrations) and the changes it then makes every front end apply (`Apply`/`Applied`).
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from gpu_runtime.priority import Priority
from gpu_runtime.vgpu.messages import Row, RowSequence
from gpu_runtime.vgpu.shm import Layout

from atoll.kserve.errors import ApiError

_LENGTH = struct.Struct("<I")


@dataclass(frozen=True)
class Hello:
    """Front end -> supervisor: listening and ready to send work."""

    front_end: int
    pid: int


@dataclass(frozen=True)
class Submit:
    """Front end -> dispatcher: a request's rows, made in its slots. Real-time rows go out at once
    as their own batch; best-effort rows join the batcher one by one."""

    model: str
    priority: Priority
    deadline: float  # time.monotonic() after which nobody waits for the answer
    rows: tuple[Row, ...]
    level: int = 0  # the request's Triton priority level (0: none given), for the model's queue policies
    timeout_us: int = 0  # the request's own `timeout` parameter (0: none), ditto
    sequence: RowSequence | None = None  # a stateful model's request: its sequence ID and flags


@dataclass(frozen=True)
class Cancel:
    """Front end -> dispatcher: these rows' request gave up (timeout, client gone, another row of
    it failed); any of them still queued is dropped unexecuted (and answered CANCELLED)."""

    rows: tuple[Row, ...]


class Failure(StrEnum):
    EXPIRED = "expired"  # its deadline passed before it ran: dropped unexecuted
    CANCELLED = "cancelled"  # its request gave up before it ran: dropped unexecuted
    REJECTED = "rejected"  # the row itself cannot be batched (e.g. longer than any bucket)
    BACKEND = "backend"  # the batch failed on its vGPU
    QUEUE_FULL = "queue_full"  # its model's queue policy: max_queue_size requests were queued
    QUEUE_TIMEOUT = "queue_timeout"  # its model's queue policy: it waited past its timeout (REJECT)


@dataclass(frozen=True)
class Done:
    """Dispatcher -> front end: rows finished. On success their outputs are in their slots at
    `layouts`; otherwise `failure` says how and `reason` why. Either way the slots are free again."""

    rows: tuple[Row, ...]
    layouts: tuple[Layout, ...] | None = None
    failure: Failure | None = None
    reason: str = ""


@dataclass(frozen=True)
class Health:
    """Supervisor -> front end: the models some vGPU worker can run now (sent at every change)."""

    ready_models: frozenset[str]


@dataclass(frozen=True)
class Control:
    """Front end -> supervisor: an action of `model_control` or `shm_registry`, answered by a Reply."""

    id: int
    action: object


@dataclass(frozen=True)
class Reply:
    id: int
    result: object = None
    error: ApiError | None = None


@dataclass(frozen=True)
class Apply:
    """Supervisor -> every front end: a change to make (a model added or retired, a region
    registered or dropped), answered by an Applied once made."""

    id: int
    change: object


@dataclass(frozen=True)
class Applied:
    id: int
    error: ApiError | None = None


@dataclass(frozen=True)
class Stop:
    """Supervisor -> front end: stop accepting, answer what is in flight, exit."""


def encode(message) -> bytes:
    """One frame: a message, or a list of messages (`Outbox`), read back in order by `Inbox`."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


class Outbox:
    """One end's messages, coalesced: those sent while the event loop runs one round of callbacks
    go out as one frame when the round ends, so the other side wakes and unpickles once for them;
    an `urgent` one (real-time work and its answers) goes at once, behind those already waiting,
    never into a coalescing window. `writer` may be replaced (a restarted front end's channel): a
    frame goes to the writer of the moment it is written."""

    def __init__(self, writer: asyncio.WriteTransport):
        self.writer = writer
        self._pending: list = []

    def send(self, message, urgent: bool = False) -> None:
        self._pending.append(message)
        if urgent:
            self.flush()
        elif len(self._pending) == 1:
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        if not self._pending:
            return
        messages, self._pending = self._pending, []
        if not self.writer.is_closing():
            self.writer.write(encode(messages if len(messages) > 1 else messages[0]))


class Frames(asyncio.Protocol):
    """The other end's messages, handed to `on_messages` in order as they arrive: every whole frame
    a read brought, at once, from the loop's read callback (no task, future or awaited read per
    message). `closed` is done once the other side has closed the socket."""

    def __init__(self, on_messages: Callable[[list], None]):
        self.on_messages = on_messages
        self.closed = asyncio.get_running_loop().create_future()
        self._buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if messages := _whole_frames(self._buffer):
            self.on_messages(messages)

    def connection_lost(self, exc) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def connect(sock, on_messages: Callable[[list], None]) -> tuple[asyncio.Transport, Frames]:
    """Our end of a channel over the connected socket `sock`: the transport to write to (as
    `Outbox`'s writer, or directly) and the `Frames` protocol that reads it."""
    return await asyncio.get_running_loop().create_unix_connection(lambda: Frames(on_messages), sock=sock)


def _whole_frames(buffer: bytearray) -> list:
    """The messages of the whole frames at the start of `buffer`, which loses them."""
    messages, start = [], 0
    while len(buffer) - start >= _LENGTH.size:
        (length,) = _LENGTH.unpack_from(buffer, start)
        end = start + _LENGTH.size + length
        if end > len(buffer):
            break
        frame = pickle.loads(memoryview(buffer)[start + _LENGTH.size : end])
        if type(frame) is list:
            messages.extend(frame)
        else:
            messages.append(frame)
        start = end
    if start:
        del buffer[:start]
    return messages
