"""What native libraries print on a front end's standard error, passed on as throttled log records.

libjpeg (inside OpenCV) prints a warning about each corrupt image straight to file descriptor 2,
where logging cannot reach it, and a client can send such images at will. `capture` points
descriptor 2 at a pipe that a thread reads: each line becomes an INFO record of logger
`atoll.native`, at most `BURST` lines every `WINDOW_S` seconds, then one record counting the rest.
Python's own output (logging, tracebacks, faulthandler's crash dumps) goes to the real standard
error, unthrottled. What a native library prints just before it kills the process may stay in the
pipe unread; the supervisor logs every death with its signal.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading
import time

BURST = 20
WINDOW_S = 10.0

log = logging.getLogger("atoll.native")


def capture() -> threading.Thread:
    """Call before logging is configured (its handler keeps the `sys.stderr` it finds). The thread
    returned ends once descriptor 2 is closed, everything before passed on."""
    real = os.dup(2)
    read, write = os.pipe()
    os.dup2(write, 2)
    os.close(write)
    sys.stderr = open(real, "w", buffering=1, errors="backslashreplace")  # noqa: SIM115 (the process's own)
    faulthandler.enable(sys.stderr)
    thread = threading.Thread(target=_forward, args=(read,), name="native-stderr", daemon=True)
    thread.start()
    return thread


def _forward(fd: int) -> None:
    window, shown, left_out = time.monotonic(), 0, 0
    with open(fd, "rb") as pipe:
        for line in pipe:
            now = time.monotonic()
            if now - window >= WINDOW_S:
                _left_out(left_out, now - window)
                window, shown, left_out = now, 0, 0
            if shown < BURST:
                shown += 1
                log.info("%s", line.decode(errors="replace").rstrip())
            else:
                left_out += 1
    _left_out(left_out, time.monotonic() - window)


def _left_out(lines: int, seconds: float) -> None:
    if lines:
        log.info("%d more lines from native libraries in %.0f s, not shown", lines, seconds)
