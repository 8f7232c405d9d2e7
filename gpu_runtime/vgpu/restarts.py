"""Restarts: a dead worker is restarted (after a `backoff.Backoff` delay when it keeps dying), its
models reloaded and its in-flight requests re-sent, each at most `crash_retries` times, so every
request ends in a result or an exception. A worker that cannot start (it said why, or it exited by
itself before serving) is not restarted: it stays dead and fails what it held.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
from concurrent.futures import Future

from gpu_runtime.vgpu.errors import WorkerCrashed
from gpu_runtime.vgpu.messages import Load
from gpu_runtime.vgpu.worker_handle import Request, WorkerHandle

log = logging.getLogger(__name__)


class Restarts:
    """WorkerPool's deaths and restarts. It reads the pool's `_lock`, `_ids`, `_stopping`,
    `crash_retries`, `clock` and `on_change`, and sends through its `_dispatch` and `_finish`."""

    def stop_restarts(self) -> None:
        """From now on a worker that dies stays dead and fails what it held: the server is stopping,
        and a successor would only be stopped again."""
        with self._lock:
            self._stopping = True

    def _on_death(self, worker: WorkerHandle) -> None:
        """Reap a dead worker and schedule its successor, at once or after its backoff. What it had
        in flight waits for the successor, except requests it has now died running more than
        `crash_retries` times, which fail here (and everything, if it cannot start at all)."""
        with self._lock:
            worker.process.join()
            code = worker.process.exitcode
            served = worker.state.ready
            worker.retire()
            worker.state.ready = False
            worker.state.loaded = {}
            worker.builds_before = worker.state.program_builds
            vgpu = worker.state.info.id
            if not worker.state.alive:  # it said why it cannot start (Fatal) and exited
                return
            if code > 0 and not served:
                # It exited by itself before serving (e.g. spawn could not import the parent's
                # __main__): a restart would fail the same way.
                worker.state.alive = False
                worker.state.error = f"exited with code {code} during startup (see its stderr)"
                log.error("vGPU %s: worker %s; vGPU disabled", vgpu, worker.state.error)
                self._fail_all(worker, WorkerCrashed(f"{vgpu}: worker {worker.state.error}; vGPU disabled"))
                return
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            if self._stopping:
                worker.state.alive = False
                log.info("vGPU %s: worker (pid %d) died (%s) while the server stops; not restarted", vgpu,
                         worker.state.pid, how)  # fmt: skip
                self._fail_all(worker, WorkerCrashed(f"{vgpu}: worker died ({how}) while the server stops"))
                return
            for req, request in list(worker.inflight.items()):
                request.crashes += 1
                if request.crashes > self.crash_retries:
                    del worker.inflight[req]
                    if isinstance(request.message, Load):
                        worker.models.pop(request.message.model, None)
                    self._finish(worker, request, exception=WorkerCrashed(
                        f"{vgpu}: worker died ({how}) while running this request, {request.crashes} time(s)"))
            delay = worker.backoff.delay(self.clock())
            log.warning("vGPU %s: worker (pid %d) died, %s; restarting it%s", vgpu, worker.state.pid, how,
                        f" in {delay:.1f} s (it died again soon after its last start)" if delay else "")
            worker.restart_at = self.clock() + delay

    def _start_again(self, worker: WorkerHandle) -> None:
        """Start the successor of a dead worker (under the lock): reload its models, then re-send
        what was in flight, in the order it was first sent."""
        pending = [worker.inflight[r] for r in sorted(worker.inflight)]
        worker.inflight.clear()
        worker.state.inflight_runs = 0
        worker.state.restarts += 1
        worker.start()
        pending_loads = {r.message.model for r in pending if isinstance(r.message, Load)}
        for name, message in worker.models.items():
            if name not in pending_loads:
                replay = dataclasses.replace(message, req=next(self._ids))
                self._dispatch(worker, Request(replay.req, Future(), replay))
        for request in pending:
            self._dispatch(worker, request)
        self.on_change()

    def _fail_all(self, worker: WorkerHandle, error: BaseException) -> None:
        with self._lock:
            pending = list(worker.inflight.values())
            worker.inflight.clear()
            worker.state.inflight_runs = 0
        for request in pending:
            self._finish(worker, request, exception=error)
