"""Keeping the garbage collector out of the real-time launch path.

A collection pauses the thread that triggers it for as long as it walks the heap: after a model load
that heap holds every program, view and launch argument made. `freeze_after_load()` collects once
and moves what survives out of the collector's sight (`gc.freeze`), so later collections walk only
what serving allocates. `RT_WINDOW` (`with RT_WINDOW:`) keeps collections out of a real-time launch
window altogether: the collector is off while any thread is inside one, and entering allocates
nothing that could itself trigger a collection.
"""

from __future__ import annotations

import gc
import threading


def freeze_after_load() -> None:
    gc.collect()
    gc.freeze()


class RtWindow:
    """Collections off while at least one thread is inside; the collector's prior state after."""

    def __init__(self):
        self._lock = threading.Lock()
        self._inside = 0
        self._was_enabled = False

    def __enter__(self) -> None:
        with self._lock:
            if self._inside == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._inside += 1

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0 and self._was_enabled:
                gc.enable()


RT_WINDOW = RtWindow()
