"""How long to wait before restarting a process that died: the one policy of every supervisor
(the vGPU worker pool here, the server's front ends in `atoll.supervisor.supervisor`).

There is no lifetime budget: a process that crashes now and then is restarted every time, at once,
so a server that lost one runs again within seconds. Only deaths in quick succession (a process
that dies again within `settle_s` of its start) wait, `first_s` and then twice as long each time, up
to `max_s`, so a crash loop costs little CPU and still recovers within `max_s` of its cause going.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Backoff:
    first_s: float = 0.5
    max_s: float = 5.0
    settle_s: float = 30.0  # a life this long ends a crash loop
    _next: float = field(default=0.0, init=False)
    _started: float = field(default=float("-inf"), init=False)

    def started(self, now: float) -> None:
        self._started = now

    def delay(self, now: float) -> float:
        """Seconds to wait before the next start, for a death at `now`."""
        if now - self._started >= self.settle_s:
            self._next = 0.0
        delay = self._next
        self._next = min(max(2 * self._next, self.first_s), self.max_s)
        return delay
