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
from dataclasses import dataclass
from enum import StrEnum

from gpu_runtime.priority import Priority
from gpu_runtime.vgpu.messages import Row, RowSequence
from gpu_runtime.vgpu.shm import Layout

from atoll.kserve.errors import ApiError

_LENGTH = struct.Struct("<I")
_READ_BYTES = 1 << 18  # at most this much read per wake-up (frames are small: slot references)


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

    def __init__(self, writer: asyncio.StreamWriter):
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


class Inbox:
    """The other end's messages, every whole frame a read brought at once: one wake-up and one read
    for all of them, not two awaited reads each."""

    def __init__(self, reader: asyncio.StreamReader):
        self.reader = reader
        self._buffer = bytearray()

    async def receive(self) -> list | None:
        """The messages that have arrived (at least one), in order; None once the other side has
        closed the socket."""
        while not (messages := self._whole()):
            try:
                data = await self.reader.read(_READ_BYTES)
            except ConnectionError:
                return None
            if not data:
                return None
            self._buffer += data
        return messages

    def _whole(self) -> list:
        messages, buffer, start = [], self._buffer, 0
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
