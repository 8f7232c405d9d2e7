"""What a WorkerPool's futures fail with."""


class WorkerCrashed(RuntimeError):
    """The worker died while the request was in flight, more often than the retry budget allows
    (or it could not start at all)."""


class WorkerError(RuntimeError):
    """The worker raised while serving the request (bad input, unknown model, executor failure)."""


class PoolClosed(RuntimeError):
    pass
