"""The endpoint's heap settings: `atoll serve`'s (`supervisor.process_settings.HEAP_TUNING`, which its processes get
from the environment when they start) applied to the running endpoint process through glibc's
`mallopt`. Without them every forwarded body (a 600 KB tensor request) is a fresh allocation that
glibc gives back at once, then faults in again page by page (measured: docs/cluster.md, "What the
endpoint costs")."""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Mapping

log = logging.getLogger(__name__)
# glibc's malloc.h: the mallopt parameter each environment variable sets
_MALLOPT = {"MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_TOP_PAD_": -2, "MALLOC_MMAP_THRESHOLD_": -3}


def tune_heap(settings: Mapping[str, str]) -> list[str]:
    """Apply `settings` (glibc's MALLOC_* variables and their values) to this process, but those
    its environment sets (glibc read them at start); the names applied, none where the C library
    has no mallopt (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return []
    applied = []
    for name, value in settings.items():
        if name in _MALLOPT and name not in os.environ:
            if mallopt(_MALLOPT[name], int(value)) == 1:
                applied.append(name)
            else:
                log.warning("glibc refused %s=%s", name, value)
    return applied
