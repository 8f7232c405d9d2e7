"""One timer for a connection, whatever it waits for: its next request, the rest of a body, a client
lingering after its last answer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Deadline:
    """`action` once the deadline set last has passed. Setting a later deadline moves no timer: the
    one armed re-arms itself when it fires early, so a request costs no timer set and cancelled."""

    __slots__ = ("_loop", "_timer", "_when", "_action")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None
        self._when = 0.0
        self._action: Callable[[], None] | None = None

    def set(self, delay_s: float, action: Callable[[], None]) -> None:
        """`action` in `delay_s` seconds, in place of what was set before."""
        loop = self._loop
        self._when, self._action = loop.time() + delay_s, action
        if self._timer is None or self._timer.when() > self._when:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(self._when, self._expired)

    def clear(self) -> None:
        """Nothing happens at the deadline (until one is set again)."""
        self._action = None

    def stop(self) -> None:
        """The connection is gone: cancel the timer."""
        self._action = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self._action is None:
            return
        loop = self._loop
        if loop.time() < self._when:  # a later deadline replaced the one this timer was set for
            self._timer = loop.call_at(self._when, self._expired)
            return
        action, self._action = self._action, None
        action()
