"""A logger's records at most once every so often."""

from __future__ import annotations

import logging
import time


class Throttled:
    """A logger's records at most once every `every_s` seconds: a flood of hostile or vanishing
    clients would repeat the same one thousands of times a second."""

    def __init__(self, logger: logging.Logger, every_s: float = 10.0):
        self.logger = logger
        self.every_s = every_s
        self._last = -every_s

    def warning(self, message: str, *args) -> None:
        self._log(logging.WARNING, message, *args)

    def info(self, message: str, *args) -> None:
        self._log(logging.INFO, message, *args)

    def _log(self, level: int, message: str, *args) -> None:
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self.logger.log(level, message, *args)
