"""Scheduling policies as small pure objects over one controller contract (XSched-style levels).

A policy only decides; the scheduler (`scheduler.reef.Reef`) owns queues, streams, the clock and
the mode (`scheduler.preemption`), and offers the callbacks below. The ladder:

  seq      one task at a time, RT first then BE in arrival order; nothing is ever preempted.
  streams  BE tasks on concurrent streams and the RT task on its own higher-priority stream.
  wait     level 1, hold back: stop issuing BE kernels and wait for the outstanding ones to finish.
  reset    level 2, flush: guard raised with the RT task's first kernel, BE tasks rewound; restore.
  reef     reset plus padding: BE kernels beside the RT task's (docs/scheduling.md).
"""

from __future__ import annotations

from typing import Protocol


class Controller(Protocol):
    def rt_pending(self) -> bool: ...  # an RT task is queued or running

    def rt_mode(self) -> bool: ...

    def be_active(self) -> bool: ...  # some BE task has started and not finished

    def be_kernels_outstanding(self) -> bool: ...

    def padding_open(self) -> bool: ...  # BE work may run as hardware padding beside RT now

    def wait_be_idle(self) -> None: ...  # block until no BE kernel is outstanding

    def flush_be(self) -> None: ...  # guard + clear vHQs + drain

    def restore_be(self) -> None: ...  # clear guard; tasks resume from `completed` (or keep RT mode)

    def resume_be(self) -> None: ...  # leave RT mode where nothing was flushed


class Policy:
    name = "base"
    pads = False
    # The RT task's first kernel raises the guard itself, ahead of it on the RT stream, and goes
    # out before `enter_rt` runs: right for a flush, which need not precede it, wrong for `wait`,
    # whose whole point is that the RT task starts on an idle device.
    flushes = False
    # RT tasks may start the moment they arrive: when no other RT task is queued or running, the
    # submitting thread launches the first kernel itself and the scheduler thread takes over from
    # the second (one thread hand-off less between arrival and the first kernel).
    rt_starts_at_once = False

    def be_may_start(self, ctl: Controller) -> bool:
        """May a BE task that has not started yet be given a stream now?"""
        return not ctl.rt_mode()

    def be_may_issue(self, ctl: Controller) -> bool:
        """May started BE tasks submit more kernels now?"""
        return not ctl.rt_mode()

    def rt_may_start(self, ctl: Controller) -> bool:
        return True

    def enter_rt(self, ctl: Controller) -> None:
        pass

    def leave_rt(self, ctl: Controller) -> None:
        ctl.resume_be()


class Sequential(Policy):
    name = "seq"

    def be_may_start(self, ctl):
        return not ctl.rt_pending() and not ctl.be_active()

    def be_may_issue(self, ctl):
        return True  # a started task runs to its end

    def rt_may_start(self, ctl):
        return not ctl.be_active()


class Streams(Policy):
    name = "streams"
    rt_starts_at_once = True

    def be_may_start(self, ctl):
        return True

    def be_may_issue(self, ctl):
        return True


class WaitPreempt(Policy):
    name = "wait"

    def enter_rt(self, ctl):
        ctl.wait_be_idle()


class ResetPreempt(Policy):
    name = "reset"
    flushes = True
    rt_starts_at_once = True

    def enter_rt(self, ctl):
        ctl.flush_be()

    def leave_rt(self, ctl):
        ctl.restore_be()


class ReefPolicy(ResetPreempt):
    name = "reef"
    pads = True

    def be_may_start(self, ctl):
        return not ctl.rt_mode() or ctl.padding_open()

    def be_may_issue(self, ctl):
        return not ctl.rt_mode() or ctl.padding_open()


POLICIES: dict[str, type[Policy]] = {
    p.name: p for p in (Sequential, Streams, WaitPreempt, ResetPreempt, ReefPolicy)
}


def make_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}") from None
