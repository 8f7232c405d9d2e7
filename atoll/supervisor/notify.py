"""The service manager's notify protocol (sd_notify) over `$NOTIFY_SOCKET`, with no dependency.

systemd (`Type=notify`) passes a Unix datagram socket's address in `NOTIFY_SOCKET` (a path, or an
abstract name written with a leading `@`); each datagram is newline-separated `KEY=value` lines:
READY=1, STOPPING=1, STATUS=<one line>, WATCHDOG=1. `WATCHDOG_USEC` (for `WATCHDOG_PID`, or any
process when unset) asks for WATCHDOG=1 at least that often. Without `NOTIFY_SOCKET` every call is
a no-op. The variables are taken out of the environment, so children started later do not inherit
them (with `NotifyAccess=main` the manager would ignore their messages anyway).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import MutableMapping

log = logging.getLogger(__name__)
NOTIFY_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class Notifier:
    def __init__(self, environ: MutableMapping[str, str] = os.environ, pid: int | None = None):
        """Reads (and removes) the manager's variables from `environ`; `pid` is this process's."""
        address, usec, for_pid = (environ.pop(name, "") for name in NOTIFY_ENV)
        self.address = "\0" + address[1:] if address.startswith("@") else address
        pid = os.getpid() if pid is None else pid
        mine = not for_pid or for_pid == str(pid)
        # WATCHDOG=1 twice per period, as sd_watchdog_enabled's callers are told to
        self.watchdog_s = int(usec) / 2e6 if usec.isdigit() and int(usec) > 0 and mine else None
        self._failed = False

    def ready(self, status: str) -> None:
        self.send(f"READY=1\nSTATUS={status}")

    def stopping(self, status: str) -> None:
        self.send(f"STOPPING=1\nSTATUS={status}")

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def watchdog(self) -> None:
        self.send("WATCHDOG=1")

    def send(self, message: str) -> None:
        """One datagram; a manager that went away is reported once and never stops the server."""
        if not self.address:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(message.encode(), self.address)
        except OSError as exc:
            if not self._failed:
                log.warning("cannot notify the service manager at %s: %s", self.address.replace("\0", "@"), exc)
            self._failed = True
