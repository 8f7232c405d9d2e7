"""`Preprocessor`: the one entry point for request preprocessing, whatever backend runs it.

Requests go to DPU compute units when a device (or its emulation) is open; media the DPU reports
UNSUPPORTED, and requests whose CU failed or timed out, are redone on the CPU path and say why in
`Result.fallback_reason`. Corrupt, oversized or invalid media raise `PreprocessError`.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import time
from dataclasses import dataclass, field

import numpy as np

from fpga_host import cpu_backend
from fpga_host.backends import CPU_PATH
from fpga_host.backends import backend as backend_spec
from fpga_host.dpu_driver import CuFailure
from fpga_host.probe import probe_backends
from fpga_host.status import PreprocessError, Status

@dataclass
class Result:
    array: np.ndarray
    backend: str  # the backend that produced `array` (a `fpga_host.BACKENDS` name)
    status: Status = Status.OK
    fallback_reason: str | None = None  # why the CPU produced it when a DPU backend was selected
    timings: dict[str, float] = field(default_factory=dict)  # milliseconds


class Preprocessor:
    def __init__(self, backend: str = "auto", *, cpu_workers: int | None = None,
                 image_cus: int | None = None, audio_mel_cus: int | None = None,
                 audio_norm_cus: int | None = None, manifest: str | os.PathLike | None = None,
                 cu_timeout_s: float = 5.0, max_image_dim: int = 8192, max_jpeg_scans: int = 64,
                 resize_short: int = 256, crop: int = 224, fp16: bool = False, max_audio_seconds: float = 30.0,
                 cu_share: tuple[int, int] = (0, 1)):
        """`cu_share` = (k, n): open only every n-th compute unit starting at the k-th, so n
        processes can share one DPU (each then opens at most `*_cus` of its share)."""
        if backend != "auto":
            backend_spec(backend)  # an unknown name raises, listing the choices
        if not 0 < crop <= resize_short:
            raise ValueError(f"crop ({crop}) must be in 1..resize_short ({resize_short})")
        self.image_params = cpu_backend.ImageParams(resize_short=resize_short, crop=crop,
                                                    fp16=fp16, max_dim=max_image_dim,
                                                    max_scans=max_jpeg_scans)
        self.max_audio_seconds = max_audio_seconds
        if backend == "auto":
            backend = probe_backends(manifest)["backend"]
        self.backend = backend
        self._driver = None
        opener = backend_spec(backend).open
        if opener is not None:
            self._driver = opener(
                manifest=manifest, cu_timeout_s=cu_timeout_s, image_params=self.image_params,
                max_audio_seconds=max_audio_seconds, cu_share=cu_share, cu_counts={
                    "image_cu": image_cus, "audio_mel_cu": audio_mel_cus,
                    "audio_norm_cu": audio_norm_cus})
        if cpu_workers is None:
            # With a DPU the CPU only takes fallbacks; without one it does all the work.
            cpu_workers = 1 if self._driver else (os.cpu_count() or 1)
        self._cpu = cpu_backend.CpuPool(cpu_workers)
        # Requests that can run at once: callers size their in-flight windows with it.
        self.parallelism = max(1, cpu_workers) + (len(self._driver.cu_states()) if self._driver else 0)

    # -- requests ---------------------------------------------------------------------------------

    def submit_image(self, data: bytes, stage: str = "normalize", out: np.ndarray | None = None,
                     checked: bool = False) -> cf.Future:
        """Future[Result] for one encoded image; `stage` is one of decode|resize|crop|normalize.
        With `out` (a float32 buffer, e.g. a shared-memory slot; needs `cpu_workers=0` for the CPU
        path) the normalised result is written into its start and `Result.array` is that view.
        `checked`: the caller has checked its header with these limits (`cpu_backend.image`)."""
        if stage not in cpu_backend.IMAGE_STAGES:
            raise ValueError(f"unknown image stage {stage!r}; expected one of {cpu_backend.IMAGE_STAGES}")
        start = time.perf_counter()
        cpu = lambda: self._cpu.image(data, stage, self.image_params, out, checked)  # noqa: E731
        if self._driver is None:
            return self._from_cpu(cpu(), start, None)
        return self._from_dpu(self._driver.submit_image(data, stage, out), cpu, start)

    def image_now(self, data: bytes, out: np.ndarray | None = None, checked: bool = False) -> Result:
        """`submit_image(data, "normalize", out, checked).result()`, for a caller on a thread of its
        own (a front end's lane). Where the CPU path runs on the calling thread (no DPU, no process
        pool) no future is made: two futures and their callbacks were ~20 µs an image, all of it
        holding the GIL the lane shares with its event loop."""
        if self._driver is not None or self._cpu.workers:
            return self.submit_image(data, out=out, checked=checked).result()
        start = time.perf_counter()
        array, compute_s = cpu_backend.timed(cpu_backend.image, data, "normalize", self.image_params, out, checked)
        return _cpu_result(array, compute_s, start, None)

    def submit_audio(self, pcm: np.ndarray, sample_rate: int, stage: str = "normalize",
                     out: np.ndarray | None = None) -> cf.Future:
        """Future[Result] for mono int16/float32 PCM; `stage` is mel|normalize; `out` as for images."""
        if stage not in cpu_backend.AUDIO_STAGES:
            raise ValueError(f"unknown audio stage {stage!r}; expected one of {cpu_backend.AUDIO_STAGES}")
        start = time.perf_counter()
        cpu = lambda: self._cpu.audio(pcm, sample_rate, stage, self.max_audio_seconds, out)  # noqa: E731
        if self._driver is None:
            return self._from_cpu(cpu(), start, None)
        return self._from_dpu(self._driver.submit_audio(pcm, sample_rate, stage, out), cpu, start)

    # -- completion -------------------------------------------------------------------------------

    def _from_cpu(self, inner: cf.Future, start: float, reason: str | None,
                  outer: cf.Future | None = None) -> cf.Future:
        outer = outer or cf.Future()

        def done(f: cf.Future) -> None:
            try:
                array, compute_s = f.result()
            except BaseException as exc:  # PreprocessError and worker failures reach the caller
                outer.set_exception(exc)
                return
            outer.set_result(_cpu_result(array, compute_s, start, reason))

        inner.add_done_callback(done)
        return outer

    def _from_dpu(self, inner: cf.Future, cpu, start: float) -> cf.Future:
        outer: cf.Future = cf.Future()

        def redo_on_cpu(reason: str) -> None:
            try:
                self._from_cpu(cpu(), start, reason, outer)
            except BaseException as exc:  # e.g. the CPU pool already shut down
                outer.set_exception(exc)

        def done(f: cf.Future) -> None:
            try:
                out = f.result()
            except CuFailure as exc:
                redo_on_cpu(str(exc))
                return
            except BaseException as exc:
                outer.set_exception(exc)
                return
            if out.status == Status.UNSUPPORTED:
                redo_on_cpu(f"DPU: UNSUPPORTED ({out.reason})")
            elif out.status != Status.OK:
                outer.set_exception(PreprocessError(out.status, out.reason))
            else:
                timings = dict(out.timings, total_ms=(time.perf_counter() - start) * 1e3)
                outer.set_result(Result(out.array, self.backend, Status.OK, None, timings))

        inner.add_done_callback(done)
        return outer

    def warming(self) -> list[cf.Future]:
        """Futures that finish once the CPU workers are started and warmed (empty with none)."""
        return list(self._cpu.warming)

    def describe(self) -> dict:
        """Backend, the state of every CU, and kernels whose CUs could not be opened (with why)."""
        driver = self._driver
        return {"backend": self.backend, "parallelism": self.parallelism,
                "cus": driver.cu_states() if driver else {},
                "unopened": dict(driver.unopened) if driver else {},
                "modelled_cycles": driver.modelled_cycles() if driver else {}}

    # -- lifetime ---------------------------------------------------------------------------------

    def close(self) -> None:
        if self._driver is not None:
            self._driver.close()
        self._cpu.close()

    def __enter__(self) -> "Preprocessor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _cpu_result(array: np.ndarray, compute_s: float, start: float, reason: str | None) -> Result:
    """The CPU path's result, begun at `start` (`time.perf_counter()`), computed in `compute_s`."""
    return Result(array, CPU_PATH, Status.OK, reason, {
        "compute_ms": compute_s * 1e3, "total_ms": (time.perf_counter() - start) * 1e3})
