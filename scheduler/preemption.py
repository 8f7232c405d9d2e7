"""The scheduler's preemption state: one `Mode` and every transition between modes, in one place.

RT tasks arrive on the callers' threads, and a lone one raises the device's flag there (its first
kernel is launched by `Reef.submit`); the scheduler thread lowers the flag. A lowering decided on
stale knowledge would leave BE work running unflagged beside that RT task, so the flag comes down
only under the arrivals' lock while no RT task is in the system: an arrival counted after the
clear writes its flag after it, and one counted before makes the restore keep RT mode
(tests/scheduler/test_flag_protocol.py checks every interleaving).
"""

from __future__ import annotations

import enum
import threading
from typing import Any, Callable

from scheduler.be_streams import BeStreams


class Mode(enum.Enum):
    NORMAL = "normal"  # no RT task: BE tasks run freely, the flag is down
    RT = "rt"  # RT mode: BE work does not run beside it (under flushing policies the flag is up)
    FLUSHING = "flushing"  # RT mode: flag up, the flushed BE kernels not yet exited and rewound
    PADDING = "padding"  # RT mode: flag down on purpose, BE chunks beside RT (hardware padding)


class Preemption:
    """Transitions (all on the scheduler thread but `rt_arrives`):

      enter_rt  NORMAL -> RT
      flush     RT | PADDING -> FLUSHING        flag up: BE kernels on the streams exit early
      settle    FLUSHING -> RT | PADDING        flushed kernels exited; BE tasks rewound
      resume    RT -> NORMAL                    policies that never raise the flag
      restore   any RT mode -> NORMAL           flag down, BE work resubmitted; or, when an RT
                                                task arrived meanwhile, RT (FLUSHING from PADDING)
    """

    def __init__(self, device: Any, be: BeStreams, stats: Any, pads_in_hardware: bool,
                 lock: Any = None):
        self._mode = Mode.NORMAL
        self._device = device
        self._be = be
        self._stats = stats
        self._pads_in_hardware = pads_in_hardware
        self._lock = lock if lock is not None else threading.Lock()
        self._rt_in_system = 0  # RT tasks counted in and not yet out (under _lock)
        self._flush_t0 = 0.0

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def rt_mode(self) -> bool:
        return self._mode is not Mode.NORMAL

    # ---- arrivals (callers' threads) and departures (scheduler thread) ---------------------------
    def rt_arrives(self, launch: Callable[[], None] | None) -> bool:
        """Count an RT task in. When no other RT task is in the system, `launch` (if any) starts
        it now, after the count: see the module docstring. Returns whether it launched."""
        with self._lock:
            self._rt_in_system += 1
            alone = self._rt_in_system == 1
        if alone and launch is not None:
            launch()
            return True
        return False

    def rt_departs(self) -> None:
        with self._lock:
            self._rt_in_system -= 1

    # ---- transitions (scheduler thread) ------------------------------------------------------------
    def enter_rt(self) -> None:
        self._mode = Mode.RT

    def flush(self) -> None:
        """Raise the flag; waiting for the BE kernels already on the streams is left to `settle`."""
        self._flush_t0 = self._device.clock()
        self._be.poll()  # credit what finished before the flag, nothing after
        self._device.set_flag()  # a no-op where the RT launch raised it already
        self._mode = Mode.FLUSHING

    def settle(self) -> None:
        """After a flush: wait for the flushed kernels, rewind; pad in hardware where the device does."""
        if self._mode is not Mode.FLUSHING:
            return
        self._rewind()
        if self._pads_in_hardware:
            self._device.clear_flag()  # on purpose: the RT task it pads is known and in the system
            self._mode = Mode.PADDING
        else:
            self._mode = Mode.RT

    def resume(self) -> None:
        self._mode = Mode.NORMAL

    def restore(self) -> bool:
        """Leave RT mode: lower the flag and resubmit BE work. False (RT mode kept) when an RT task
        arrived since the RT queue emptied: its flag write may already be on its way."""
        if self._mode is Mode.FLUSHING:
            self._rewind()  # the flushed kernels must be gone before the flag comes down
            self._mode = Mode.RT
        t0 = self._device.clock()
        with self._lock:
            restored = self._rt_in_system == 0
            if restored:
                self._device.clear_flag()
                self._mode = Mode.NORMAL
        if not restored:
            if self._mode is Mode.PADDING:
                self.flush()  # that arrival's flag cuts the padding chunks short
            return False
        self._be.pump_all()
        self._stats.restore_s.append(self._device.clock() - t0)
        return True

    def _rewind(self) -> None:
        self._be.drain()
        self._be.rewind()
        self._stats.flush_s.append(self._device.clock() - self._flush_t0)
