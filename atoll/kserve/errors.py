"""The errors every endpoint answers with, coded as Triton codes them.

Triton gives each failure a kind (TRITONSERVER_Error_Code) and maps it to an HTTP status and a gRPC
status code; `tritonclient` users and dashboards read those, so an error here names its kind and both
transports answer with Triton's mapping. Three kinds are Atoll's own, where Triton has no answer of
its own: a request not answered within the server's timeout, a body over its size limit, and a body
that did not arrive in time. An overload refusal says when to try again (`retry_after_s`: HTTP's
Retry-After; gRPC has no such field, its message says it).
"""

from __future__ import annotations

from enum import Enum

# What a client is told of a bug (its type, message and traceback are the server log's, never an answer's)
INTERNAL_ERROR = "internal error (the server's log has its cause)"


class ErrorCode(Enum):
    """(HTTP status, gRPC status code name) of each kind."""

    INVALID_ARG = (400, "INVALID_ARGUMENT")
    NOT_FOUND = (404, "NOT_FOUND")
    ALREADY_EXISTS = (400, "ALREADY_EXISTS")
    INTERNAL = (500, "INTERNAL")
    UNAVAILABLE = (503, "UNAVAILABLE")
    UNSUPPORTED = (501, "UNIMPLEMENTED")
    TIMEOUT = (504, "DEADLINE_EXCEEDED")
    TOO_LARGE = (413, "RESOURCE_EXHAUSTED")
    BODY_TIMEOUT = (408, "DEADLINE_EXCEEDED")

    @property
    def http(self) -> int:
        return self.value[0]

    @property
    def grpc(self) -> str:
        return self.value[1]


class ApiError(Exception):
    """A call answered with an error: its kind and the message the client sees."""

    def __init__(self, code: ErrorCode, message: str, retry_after_s: int | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s

    def __reduce__(self):  # crosses the control channel between processes
        return ApiError, (self.code, self.message, self.retry_after_s)
