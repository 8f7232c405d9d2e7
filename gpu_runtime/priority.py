"""Request priority: the one definition every queue of the data plane orders work by.

It lives here, in the lowest package that queues work by priority (vGPU workers and their engines);
the scheduler and the server import it from here. `batching` never sees it (real-time work skips the
batcher) and `fpga_host` neither (the front end orders preprocessing before it reaches a backend),
so neither has to break its rule of importing nothing of ours. Members equal their strings ("rt",
"be"), which is how the scheduler's task queues spell them.
"""

from __future__ import annotations

import os
import sys
import threading
from enum import StrEnum


class Priority(StrEnum):
    RT = "rt"  # real-time: Triton priority 1; overtakes best-effort work at every queue
    BE = "be"  # best-effort: everything else

    @classmethod
    def of(cls, value: str) -> Priority:
        """`value` as a Priority; ValueError naming both choices for anything else."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"priority must be {cls.RT.value!r} or {cls.BE.value!r}, got {value!r}") from None


# Threads doing best-effort work run this much nicer than the rest (front-end preprocessing, the
# BE lane of a vGPU worker), so a real-time thread that wakes up on a busy CPU gets it at once
# (CFS weights 1024 vs 110) instead of sharing it; best-effort work still gets every idle cycle.
# A server sets it for all its processes through the environment (`[server] be_nice`).
BE_NICE = 10
BE_NICE_ENV = "ATOLL_BE_NICE"

# The real-time path runs under SCHED_FIFO where the OS permits it (root, or CAP_SYS_NICE;
# elsewhere its threads stay ordinary): real-time lanes at `RT_FIFO + 1`, and at `RT_FIFO` the
# threads that relay messages between the data plane's processes (`relay_this_thread`). A waking
# one then takes a core from any ordinary thread at once, not only from niced BE work. `[server]
# rt_fifo`; 0 = off. A real-time request passes eight relays (front end -> supervisor -> vGPU worker
# and back), each of which waited for a core as an ordinary thread under load (measured:
# docs/data-plane.md, "Settings that rest on a measurement"). Every such thread's job is bounded
# (one preprocessing or batch at a time; a relay passes a message on), and Linux's RT throttling
# keeps 5 % of every core for the rest regardless.
RT_FIFO = 1
RT_FIFO_ENV = "ATOLL_RT_FIFO"


def _fifo(level: int) -> None:
    if level > 0 and hasattr(os, "SCHED_FIFO"):
        try:
            # RESET_ON_FORK: threads it starts (a native library's pool, an executor's) are ordinary
            os.sched_setscheduler(threading.get_native_id(), os.SCHED_FIFO | os.SCHED_RESET_ON_FORK,
                                  os.sched_param(min(99, level)))  # fmt: skip
        except OSError:  # not permitted here: an ordinary thread, still ahead of the niced BE work
            pass


def _rt_fifo() -> int:
    return int(os.environ.get(RT_FIFO_ENV, RT_FIFO))


def prioritise_this_thread(priority: Priority) -> None:
    """Give the calling thread the OS priority of `priority` work: SCHED_FIFO for real-time lanes
    where permitted, a higher nice value for best-effort ones."""
    if priority == Priority.RT:
        level = _rt_fifo()
        _fifo(level + 1 if level > 0 else 0)
        return
    tid = threading.get_native_id()  # Linux keeps a policy and a nice value per thread
    nice = int(os.environ.get(BE_NICE_ENV, BE_NICE))
    if nice > 0 and hasattr(os, "setpriority"):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
        except OSError:  # not permitted: BE work then competes as an equal
            pass


def pin_this_thread(core: int) -> None:
    """Keep the calling thread on `core` (Linux keeps an affinity per thread); left where the OS
    places it where that is not possible (another OS, a core outside the process's cpuset)."""
    try:
        os.sched_setaffinity(threading.get_native_id(), {core})
    except (AttributeError, OSError):
        pass


def above_real_time_this_thread() -> None:
    """SCHED_FIFO one level above the real-time lanes where permitted (ordinary where they are):
    for a thread that measures how long a ready real-time thread may wait for its core and the
    interpreter lock (the real-time analysis' stall probe, atoll/bench/rt_wcet.py) without waiting
    for the real-time lanes' own runs, which it preempts."""
    level = _rt_fifo()
    _fifo(level + 2 if level > 0 else 0)


def relay_this_thread() -> None:
    """For a thread that passes messages of every priority on between the data plane's processes
    (a front end's or the supervisor's event loop, a vGPU pipe's sender or receiver): SCHED_FIFO
    one level below the real-time lanes where permitted (see RT_FIFO). Call it from the thread
    itself, once serving starts: threads it starts afterwards are ordinary."""
    _fifo(_rt_fifo())


def make_this_thread_background() -> None:
    """Linux's idle scheduling class for the calling thread (SCHED_IDLE; elsewhere nice 19): for
    work such as model loads, which may take the cycles serving leaves but none it needs. A waking
    thread of any other class preempts it at once, where nice 19 still shares a core for a
    scheduler slice (docs/data-plane.md, "Settings that rest on a measurement"); on a saturated
    machine it waits. Threads it starts inherit its class (and an unprivileged process cannot
    raise it again), so serving threads must be started elsewhere."""
    tid = threading.get_native_id()
    try:
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux: the lowest nice value instead
        if hasattr(os, "setpriority"):
            os.setpriority(os.PRIO_PROCESS, tid, 19)


# While another thread waits, the one holding the GIL keeps it up to the interpreter's switch
# interval (5 ms by default), so in a process where real-time threads share the interpreter with
# busy best-effort ones every GIL acquisition of an RT thread could wait that long; 0.5 ms instead
# (measured: docs/data-plane.md, "Settings that rest on a measurement").
GIL_SWITCH_S = 0.0005


def favour_real_time_threads() -> None:
    """Called once by every process of the data plane (front ends, dispatcher, vGPU workers)."""
    sys.setswitchinterval(GIL_SWITCH_S)
