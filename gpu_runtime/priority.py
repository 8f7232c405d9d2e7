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

# Real-time lane threads run under SCHED_FIFO at this priority where the OS permits it (root, or
# CAP_SYS_NICE; elsewhere they stay ordinary threads): a waking RT lane then takes a core from any
# ordinary thread at once, event loops included, not only from niced BE work. 2-core VM, `bench
# serve --rt-isolation`, web JPEGs, six runs each: real-time p99 beside saturating best-effort
# load 18.6 ms on average against 20.3 (1.71x its idle p99 against 2.01x; runs spread over
# 16-25 ms, so a small gain), best-effort throughput unchanged. Its jobs are bounded (one
# preprocessing or one batch at a time), and Linux's RT throttling keeps 5 % of every core for
# the rest regardless. `[server] rt_fifo`; 0 = off.
RT_FIFO = 1
RT_FIFO_ENV = "ATOLL_RT_FIFO"


def prioritise_this_thread(priority: Priority) -> None:
    """Give the calling thread the OS priority of `priority` work: SCHED_FIFO for real-time lanes
    where permitted, a higher nice value for best-effort ones."""
    tid = threading.get_native_id()  # Linux keeps a policy and a nice value per thread
    if priority == Priority.RT:
        level = min(99, int(os.environ.get(RT_FIFO_ENV, RT_FIFO)))
        if level > 0 and hasattr(os, "SCHED_FIFO"):
            try:
                # RESET_ON_FORK: threads it starts (a native library's pool) are ordinary threads
                os.sched_setscheduler(tid, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(level))
            except OSError:  # not permitted here: still ahead of the niced BE work
                pass
        return
    nice = int(os.environ.get(BE_NICE_ENV, BE_NICE))
    if nice > 0 and hasattr(os, "setpriority"):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
        except OSError:  # not permitted: BE work then competes as an equal
            pass


def make_this_thread_background() -> None:
    """Linux's idle scheduling class for the calling thread (SCHED_IDLE; elsewhere nice 19): for
    work such as model loads, which may take the cycles serving leaves but none it needs. A waking
    thread of any other class preempts it at once, where nice 19 still shares a core for a
    scheduler slice (2-core VM, MobileNetV3 at 250 req/s while CitriNet loads: p99 26 vs 55 ms);
    on a saturated machine it waits. Threads it starts inherit its class (and an unprivileged
    process cannot raise it again), so serving threads must be started elsewhere."""
    tid = threading.get_native_id()
    try:
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux: the lowest nice value instead
        if hasattr(os, "setpriority"):
            os.setpriority(os.PRIO_PROCESS, tid, 19)


# While another thread waits, the one holding the GIL keeps it up to the interpreter's switch
# interval (5 ms by default), so in a process where real-time threads share the interpreter with
# busy best-effort ones every GIL acquisition of an RT thread could wait that long. 0.5 ms cut RT
# p99 beside closed-loop BE load by a quarter (2-core VM, MobileNetV3: ~33 -> ~25 ms).
GIL_SWITCH_S = 0.0005


def favour_real_time_threads() -> None:
    """Called once by every process of the data plane (front ends, dispatcher, vGPU workers)."""
    sys.setswitchinterval(GIL_SWITCH_S)
