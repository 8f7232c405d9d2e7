"""How a connection reads the body of the request it receives (`edge.Connection`): within its
`BodyLimits`, in one of three ways. Chunks through the parser (a chunked body, or one whose head
ended mid-read); or, its length known and its head ended at a read's end, straight into its place
by the kernel (`place`), one copy instead of the parser's copy and a join; or, the request answered
early, dropped as it arrives (`drop`), by the kernel (MSG_TRUNC) so that a refusal never copies
the body it refuses. While a body is placed or dropped, the loop is woken once what is awaited
has arrived (SO_RCVLOWAT), not at every segment."""

from __future__ import annotations

import socket

from atoll.http.bodies import BodyLimits, content_length, decoded, too_large
from atoll.http.messages import HttpRequest


class BodyReader:
    """The body arriving on one connection, read one of the ways above; `length` is what its head
    declares (None: chunked, or none said), `left` what is still to come of a body placed or dropped. `sock` is the transport's socket, once connected
    (None: woken at every segment, and what is dropped is copied out first)."""

    def __init__(self, limits: BodyLimits):
        self.limits = limits
        self.length: int | None = None
        self.left = 0
        self.sock: socket.socket | None = None
        self._lowat = 1  # SO_RCVLOWAT now set on the socket
        self._chunks: list[bytes] = []
        self._size = 0
        self._placed: bytearray | None = None
        self._early_at = 0  # bytes of the body placed when the route's early answer is asked (0: never)

    def sized(self, request: HttpRequest) -> None:
        """Take `request`'s Content-Length as the `length` of its body, counted whole in the budget
        before it arrives; BodyError if it is too large (on the wire: `decoded` bounds what it
        decodes to) or the budget refuses it."""
        self.length = length = content_length(request.headers)
        if length is not None and length > self.limits.max_bytes:
            raise too_large(self.limits.max_bytes)
        if length and self.limits.budget is not None:
            self.limits.budget.take(request, length)

    # -- through the parser ---------------------------------------------------------------------------

    def chunk(self, request: HttpRequest, chunk: bytes) -> None:
        """Keep `chunk`, a piece of `request`'s body from the parser; BodyError past the limits."""
        self._size += len(chunk)
        limits = self.limits
        if self._size > limits.max_bytes:
            raise too_large(limits.max_bytes)
        if limits.budget is not None and "content-length" not in request.headers:
            limits.budget.take(request, len(chunk))  # chunked: counted as it arrives
        self._chunks.append(chunk)

    def chunked(self) -> bytes:
        """The body the parser read, whole; the next one starts afresh."""
        chunks, self._chunks, self._size = self._chunks, [], 0
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    # -- past the parser ------------------------------------------------------------------------------

    def place(self, at_hand: int, early_at: int = 0) -> None:
        """Read the body (`length` bytes) into its place, `at_hand` of them in the read being parsed;
        with `early_at` (past `at_hand`), the loop is first woken once that many have arrived, for
        the route's early answer (`early_due`)."""
        self._early_at = early_at if at_hand < early_at < self.length else 0
        # until the early answer is asked, only its bytes have a place: a refused body is never allocated
        self._placed, self.left = bytearray(self._early_at or self.length), self.length
        if at_hand < self.length:
            self.wake_at((self._early_at or self.length) - at_hand)

    def space(self) -> memoryview:
        """Where the kernel copies what comes next of the body being placed."""
        return memoryview(self._placed)[self.length - self.left:]

    def copy(self, data: memoryview) -> int:
        """Copy the start of `data` (a read being parsed) into the body being placed; how much."""
        take = min(len(data), self.left)
        start = self.length - self.left
        self._placed[start:start + take] = data[:take]
        self.left -= take
        return take

    def filled(self, nbytes: int) -> bool:
        """`nbytes` more of the body are in place (`space`): whether it is whole (else the rest is
        awaited)."""
        self.left -= nbytes
        if self.left:  # a short read: wake for what is awaited (the bound was set for more)
            got = self.length - self.left
            self.wake_at(self._early_at - got if self._early_at > got else self.left)
        return not self.left

    def early_due(self) -> memoryview | None:
        """The body's first bytes, once `early_at` of them are in place (once): what the route's
        early answer reads."""
        got = self.length - self.left
        if not self._early_at or got < self._early_at:
            return None
        self._early_at = 0
        return memoryview(self._placed)[:got]

    def place_rest(self) -> None:
        """Not answered early after all: the whole body gets its place, and is awaited."""
        got = self.length - self.left
        whole = bytearray(self.length)
        whole[:got] = memoryview(self._placed)[:got]
        self._placed = whole
        self.wake_at(self.left)

    def drop_rest(self) -> None:
        """Drop what is still to come of the body being placed: it was answered early after all."""
        self._placed = None
        self.wake_at(1)

    def placed(self) -> bytearray:
        """The body placed, whole."""
        body, self._placed = self._placed, None
        self.wake_at(1)
        return body

    def drop(self) -> None:
        self.left = self.length

    def dropped(self, nbytes: int) -> bool:
        """`nbytes` more of the body being dropped are gone: whether all of it is."""
        self.left -= nbytes
        if self.left:
            return False
        self.wake_at(1)
        return True

    @property
    def discards(self) -> bool:
        """Whether what is dropped is dropped in the kernel (`discard`)."""
        return self.sock is not None

    def discard(self, buffer: memoryview) -> bool:
        """Drop what has arrived of the body being dropped without copying it out of the kernel
        (MSG_TRUNC: `buffer` is only named), and await the rest: whether all of it is gone."""
        raw = self.sock
        if raw is None:
            return False
        sock = socket.socket(raw.family, raw.type, raw.proto, raw.fileno())  # the transport's, borrowed
        try:
            nbytes = sock.recv_into(buffer, min(self.left, len(buffer)), socket.MSG_TRUNC | socket.MSG_DONTWAIT)
            if self.dropped(nbytes):
                return True
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:  # the connection failed: the transport hears of it too
            return False
        finally:
            sock.detach()  # never closed here
        self.wake_at(self.left)
        return False

    def stop(self) -> None:
        """The body is not read on (its request refused): what still comes is dropped as it comes."""
        self._placed, self._chunks, self._size = None, [], 0
        self.wake_at(1)

    # -- once whole -----------------------------------------------------------------------------------

    def whole(self, request: HttpRequest, body: bytes | bytearray) -> None:
        """Give `request` its `body`, any Content-Encoding undone; BodyError if that fails or
        passes the limit. Either way it no longer counts as arriving in the budget."""
        encoding = request.headers.get("content-encoding", "identity").lower()
        if encoding != "identity" and body:
            body = decoded(body, encoding, self.limits.max_bytes)
        request.body = body
        if self.limits.budget is not None:
            self.limits.budget.arrived(request)

    def wake_at(self, nbytes: int) -> None:
        """Have the loop woken for this socket once `nbytes` have arrived (SO_RCVLOWAT; the kernel
        caps it at half its largest receive buffer): on a busy core each wake-up is a context switch."""
        if self.sock is not None and (nbytes > 1 or self._lowat > 1):
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, nbytes)
                self._lowat = nbytes
            except OSError:  # not a TCP socket, or the kernel refuses: woken at every segment, as before
                self.sock = None
