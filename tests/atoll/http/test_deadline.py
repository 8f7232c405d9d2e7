"""A connection's one timer (`deadline.Deadline`) on a loop whose clock the test moves."""

from __future__ import annotations

from atoll.http.deadline import Deadline


class Loop:
    """The two calls a `Deadline` makes of its loop, on a clock moved by `advance`."""

    def __init__(self):
        self.now = 0.0
        self.timers: list[Timer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback):
        timer = Timer(when, callback)
        self.timers.append(timer)
        return timer

    def advance(self, to: float) -> None:
        self.now = to
        for timer in [t for t in self.timers if t.when() <= to and not t.cancelled]:
            self.timers.remove(timer)
            timer.callback()

    @property
    def armed(self) -> list[float]:
        return [t.when() for t in self.timers if not t.cancelled]


class Timer:
    def __init__(self, when: float, callback):
        self._when, self.callback, self.cancelled = when, callback, False

    def when(self) -> float:
        return self._when

    def cancel(self) -> None:
        self.cancelled = True


def _set_twice(first_s: float, second_s: float) -> tuple[Loop, list[str]]:
    """A deadline set `first_s`, then `second_s` from now; its loop, and what has run."""
    loop, done = Loop(), []
    deadline = Deadline(loop)
    deadline.set(first_s, lambda: done.append("first"))
    deadline.set(second_s, lambda: done.append("second"))
    return loop, done


def test_a_later_deadline_moves_no_timer_and_the_one_armed_rearms_for_it():
    loop, done = _set_twice(5, 10)
    assert loop.armed == [5]
    loop.advance(5)
    assert done == [] and loop.armed == [10]
    loop.advance(10)
    assert done == ["second"] and loop.armed == []


def test_an_earlier_deadline_replaces_the_timer():
    loop, done = _set_twice(10, 5)
    assert loop.armed == [5]
    loop.advance(10)
    assert done == ["second"]


def test_a_cleared_or_stopped_deadline_does_nothing():
    loop, done = Loop(), []
    deadline = Deadline(loop)
    deadline.set(5, lambda: done.append("cleared"))
    deadline.clear()
    loop.advance(5)
    deadline.set(5, lambda: done.append("stopped"))  # at 10
    deadline.stop()
    assert loop.armed == []
    loop.advance(20)
    assert done == []
