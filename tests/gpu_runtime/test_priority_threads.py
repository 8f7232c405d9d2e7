"""`prioritise_this_thread` and `relay_this_thread`: what the OS reports for real-time and
best-effort lane threads and for relays (`os.sched_getscheduler` and `os.getpriority` read the
kernel's per-thread policy and nice value)."""

from __future__ import annotations

import os
import threading

import pytest

from gpu_runtime.priority import BE_NICE, RT_FIFO, RT_FIFO_ENV, Priority, prioritise_this_thread, relay_this_thread

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_FIFO"), reason="no per-thread scheduling policies here")


def _in_thread(fn):
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join()
    return out[0]


def fifo_permitted() -> bool:
    def probe() -> bool:
        try:
            os.sched_setscheduler(threading.get_native_id(), os.SCHED_FIFO, os.sched_param(1))
            return True
        except OSError:
            return False

    return _in_thread(probe)


def _lane(priority: Priority | None):
    """(policy, FIFO priority, nice) of a thread after `prioritise_this_thread` (None:
    `relay_this_thread`), and the policy of a thread that thread starts."""

    def run():
        if priority is None:
            relay_this_thread()
        else:
            prioritise_this_thread(priority)
        me = threading.get_native_id()
        child = _in_thread(lambda: os.sched_getscheduler(threading.get_native_id()))
        return (os.sched_getscheduler(me), os.sched_getparam(me).sched_priority,
                os.getpriority(os.PRIO_PROCESS, me), child)  # fmt: skip

    return _in_thread(run)


@pytest.mark.parametrize("priority, fifo_level", [(Priority.RT, RT_FIFO + 1), (None, RT_FIFO)], ids=["lane", "relay"])
def test_real_time_lanes_and_relays_run_fifo_where_permitted_and_their_children_do_not(monkeypatch, priority,
                                                                                       fifo_level):
    """Real-time lanes one level above the relays, which pass messages of both priorities on."""
    monkeypatch.delenv(RT_FIFO_ENV, raising=False)
    policy, level, nice, child = _lane(priority)
    if fifo_permitted():
        assert policy == os.SCHED_FIFO | os.SCHED_RESET_ON_FORK and level == fifo_level
    else:  # an unprivileged user: an ordinary thread, as before
        assert policy == os.SCHED_OTHER and level == 0
    assert child == os.SCHED_OTHER  # a native pool started from the lane does not inherit it
    assert nice == os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_fifo_off_and_best_effort_niced(monkeypatch):
    monkeypatch.setenv(RT_FIFO_ENV, "0")
    assert _lane(Priority.RT)[0] == os.SCHED_OTHER
    assert _lane(None)[0] == os.SCHED_OTHER
    policy, _, nice, _ = _lane(Priority.BE)
    assert policy == os.SCHED_OTHER
    assert nice == min(19, os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) + BE_NICE)
