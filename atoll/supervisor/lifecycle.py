"""`atoll serve`'s life as a service: start, readiness, and a stop on SIGTERM or SIGINT.

A stop is the supervisor's alone: service managers signal the whole process group, so the children
it starts begin with SIGINT and SIGTERM blocked (`shielded`; a signal mask survives fork and exec)
and none dies of, or is restarted for, the group's signal. A signal during start-up cancels the
start. Phases, one log line each: stopping (front ends drain for up to `server.drain_s`), front ends
stopped, vGPU workers stopped, stopped. The service manager (`notify.py`) hears STATUS= at each
step, READY=1 once `start()` returns, STOPPING=1 at the stop and WATCHDOG=1 while the loop turns
(docs/service.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from multiprocessing import resource_tracker

from gpu_runtime.priority import relay_this_thread

from atoll.supervisor.notify import Notifier

log = logging.getLogger(__name__)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def shielded():
    """Processes started inside begin with SIGINT and SIGTERM blocked, and keep them blocked; so do
    threads started inside (this process's signals then go to its other threads)."""
    resource_tracker.ensure_running()  # its first start unblocks them in this thread when it is done
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


async def serve_forever(service, notifier: Notifier | None = None) -> None:
    """Start `service` (`start()`, `stop()`, `http_url`, ...), serve until a stop signal, stop it.
    Errors of `start()` propagate once what it started is stopped."""
    notifier = notifier or Notifier()
    loop = asyncio.get_running_loop()
    signalled: list[signal.Signals] = []
    stop = asyncio.Event()

    def on_signal(sig: signal.Signals) -> None:
        signalled.append(sig)
        stop.set()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    # heard even where this process began with them blocked (a cluster node's, started by a shielded Ray worker)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    watchdog = asyncio.create_task(_watchdog(notifier)) if notifier.watchdog_s else None
    notifier.status("starting: loading models")
    starting = asyncio.create_task(service.start())
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting  # raises what start() raised
        if not stop.is_set():
            relay_this_thread()  # the dispatcher's loop passes every row on, real-time ones among them
            where = (f"{service.http_url}" + (f" and grpc://{service.grpc_address}" if service.grpc_address else "")
                     + (f" (metrics {service.metrics_url}/metrics)" if service.metrics_url else ""))  # fmt: skip
            print(f"atoll: serving on {where}", flush=True)
            notifier.ready(f"serving on {where}")
            await stop.wait()
        drain_s = service.config.server.drain_s
        log.info("stopping on %s: refusing new requests, answering those in flight for up to %g s (server.drain_s)",
                 signalled[0].name, drain_s)  # fmt: skip
        notifier.stopping(f"stopping: answering requests in flight for up to {drain_s:g} s")
    finally:
        stopped.cancel()
        try:
            await service.stop()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            if watchdog is not None:
                watchdog.cancel()
    log.info("stopped")


async def _watchdog(notifier: Notifier) -> None:
    while True:
        notifier.watchdog()
        await asyncio.sleep(notifier.watchdog_s)
