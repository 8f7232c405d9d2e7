"""OS names for the data plane's threads, so per-thread CPU clocks say which stage spent them.

`atoll bench serve` reads every thread's CPU time from /proc and sums it by name into stages
(`atoll.bench.cpu_account`): a name costs nothing while serving. Python 3.11 names no OS thread,
and a new thread inherits its creator's name (which is how onnxruntime's pool threads get theirs:
`named_while`). Linux keeps 15 bytes; elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading
from contextlib import contextmanager

PR_SET_NAME, PR_GET_NAME = 15, 16  # <linux/prctl.h>
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True) if sys.platform == "linux" else None


def name_this_thread(name: str | None = None) -> None:
    """This OS thread named `name`, by default its Python thread's name."""
    name = threading.current_thread().name if name is None else name
    if _libc is not None:
        _libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def this_thread_name() -> str:
    if _libc is None:
        return ""
    buf = ctypes.create_string_buffer(16)
    _libc.prctl(PR_GET_NAME, buf, 0, 0, 0)
    return buf.value.decode(errors="replace")


@contextmanager
def named_while(name: str):
    """This thread is `name` inside the block (threads it starts there inherit the name), then its
    own name again."""
    before = this_thread_name()
    name_this_thread(name)
    try:
        yield
    finally:
        name_this_thread(before)
