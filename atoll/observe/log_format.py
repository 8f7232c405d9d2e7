"""How `atoll serve` and its front ends write their log lines.

`plain`: a timestamp first, for a terminal or a file. `journal`: no timestamp (journald stamps every
line itself) and a syslog priority prefix (`<4>` for a warning) that journald turns into the entry's
priority, so `journalctl -p warning` finds warnings. The default is `journal` when standard error is
the journal's stream (`$JOURNAL_STREAM` names its device and inode, as systemd documents), else
`plain`. The supervisor's choice reaches its children through `LOG_FORMAT_ENV`: their standard error
is not the one the server started with (see native_stderr.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

LOG_FORMATS = ("plain", "journal")
LOG_FORMAT_ENV = "ATOLL_LOG_FORMAT"
SYSLOG_PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}


def default_log_format(environ: Mapping[str, str] = os.environ, stderr_fd: int = 2) -> str:
    """`journal` if `stderr_fd` is the stream `$JOURNAL_STREAM` names, else `plain`."""
    try:
        st = os.fstat(stderr_fd)
    except OSError:
        return "plain"
    return "journal" if environ.get("JOURNAL_STREAM") == f"{st.st_dev}:{st.st_ino}" else "plain"


class JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        priority = SYSLOG_PRIORITY.get(record.levelno, 6 if record.levelno < logging.WARNING else 3)
        return f"<{priority}>{super().format(record)}"


def formatter(log_format: str, who: str = "") -> logging.Formatter:
    """`who`: what tells this process's lines apart (a front end's `fe0 `)."""
    if log_format == "journal":
        return JournalFormatter(f"{who}%(name)s: %(message)s")
    return logging.Formatter(f"%(asctime)s {who}%(name)s: %(message)s")


def configure_logging(log_format: str | None = None, who: str = "") -> str:
    """Log INFO and above to standard error in `log_format` (None: the one this process inherited
    through `LOG_FORMAT_ENV`, else the default), and pass it on to children; returns it."""
    log_format = log_format or os.environ.get(LOG_FORMAT_ENV) or default_log_format()
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}; got {log_format!r}")
    os.environ[LOG_FORMAT_ENV] = log_format
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(log_format, who))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    return log_format
