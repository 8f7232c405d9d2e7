"""DPU status codes (word 0 of every CU status buffer, see hls/ABI_DPU.md) and the error they become."""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    OK = 0
    UNSUPPORTED = 1
    CORRUPT = 2
    TOO_LARGE = 3
    BAD_ARGS = 4
    EMPTY = 5
    TOO_LONG = 6
    NON_FINITE = 7
    BAD_RATE = 8


class PreprocessError(Exception):
    """Media that no backend will preprocess (corrupt, too large, bad audio); `reason` is for humans."""

    def __init__(self, status: Status, reason: str):
        super().__init__(f"{Status(status).name}: {reason}")
        self.status = Status(status)
        self.reason = reason

    def __reduce__(self):  # keep both fields when the error crosses a process-pool boundary
        return (PreprocessError, (self.status, self.reason))


def reason_of(exc: BaseException) -> str:
    """One line naming an exception, for `available: False` probe entries and logs."""
    return f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
