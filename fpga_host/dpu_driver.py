"""The DPU driver shared by every device backend: CU pool, buffers, timeouts and the CPU fallback.

Each CU in the manifest is opened with its own pre-allocated buffers and runs one request at a time
on a thread of its own. Audio is chained as in PREBA: a mel CU writes the log-mel into a hand-off
buffer that a norm CU reads on the device, so the mel CU takes the next request meanwhile. A device
API is behind a `Port` (xrt_driver.XrtPort, pynq_driver.PynqPort) whose `ended` never blocks, so
timeouts are the driver's own deadline over polls: neither API's wait is a bound to rely on
(docs/hardware.md). A CU that errors is retired; one past its deadline (no API can abort a command)
is out of service until that command ends, within `QUARANTINE_S`, else retired. Either way the
request fails with `CuFailure`, which the Preprocessor answers on the CPU path.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import math
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np

from fpga_host import jpeg_header
from fpga_host.csim import whole_beats
from fpga_host.cpu_backend import AUDIO_RATE, ImageParams, resized_shape
from fpga_host.manifest import KernelSpec, Manifest
from fpga_host.status import Status

IMAGE_STAGE_CODES = {"decode": 0, "resize": 1, "crop": 2, "normalize": 3}
STATUS_WORDS = 8
UNSET_STATUS = np.full(STATUS_WORDS, 0xFFFFFFFF, np.uint32).view(np.uint8)  # no Status has this code
N_MELS = 80
HOP = 160
MAX_RATE = 48000
INITIAL_JPEG_BYTES = 1 << 20
HANDOFFS_PER_MEL_CU = 2  # a mel CU can run ahead of the norm CUs by one request

# What the driver sets on each kernel, by name (hls/ABI_DPU.md); checked against the manifest at open.
KERNEL_ARGS = {
    "image_cu": ("jpeg", "jpeg_len", "scratch", "scratch_bytes", "out", "out_bytes", "status",
                 "stage", "resize_short", "crop", "out_fp16", "max_dim"),
    "audio_mel_cu": ("pcm", "n_samples", "sample_format", "sample_rate", "max_samples", "mel",
                     "mel_capacity", "status"),
    "audio_norm_cu": ("mel", "n_frames", "out", "status"),
}

REASONS = {
    Status.UNSUPPORTED: "JPEG coding the image CU does not implement "
                        "(progressive, arithmetic, 12-bit, lossless or CMYK)",
    Status.CORRUPT: "malformed JPEG stream",
    Status.TOO_LARGE: "image larger than the configured maximum dimension",
    Status.BAD_ARGS: "CU rejected its arguments (buffer too small or bad parameter)",
    Status.EMPTY: "audio has no samples (or too few to normalise)",
    Status.TOO_LONG: "audio longer than the configured maximum",
    Status.NON_FINITE: "audio contains NaN or infinite samples",
    Status.BAD_RATE: "sample rate outside 8000..48000 Hz",
}


class BackendUnavailable(RuntimeError):
    """A backend that was asked for cannot be opened on this machine."""


class CuFailure(Exception):
    """A CU timed out or failed, or none is left: the request belongs on the CPU path."""


@dataclass
class DpuOutput:
    status: Status
    reason: str = ""
    array: np.ndarray | None = None
    timings: dict[str, float] = field(default_factory=dict)  # milliseconds


class Ended(NamedTuple):
    ok: bool
    what: str  # the final state, as the device API names it


class Port(Protocol):
    """One device API under the driver. Buffers and CUs are the API's own objects."""

    def open_cu(self, kernel: str, cu: str): ...  # RuntimeError when it cannot be opened
    def buffer(self, cu, arg_index: int, size: int): ...  # in the memory that argument reaches
    def size(self, buf) -> int: ...
    def write(self, buf, data: np.ndarray) -> None: ...  # host -> device, from offset 0
    def read(self, buf, nbytes: int) -> np.ndarray: ...  # device -> host: a uint8 view of the buffer
    def start(self, cu, args: list): ...  # a started command; args are buffers and u32 ints
    def ended(self, command) -> Ended | None: ...  # None while it runs; never blocks
    def close(self) -> None: ...


def scratch_bytes(max_dim: int) -> int:
    """Frame store for the largest accepted image (image_cu_scratch_bytes): 3 planes padded to
    whole 16x16 MCUs, their rows to whole 64-byte beats."""
    rows = (max_dim + 15) // 16 * 16
    return 3 * whole_beats(rows) * rows


def max_frames(max_seconds: float) -> int:
    """Frames of the longest accepted clip (T = 1 + n16 // hop), plus one for resampling rounding."""
    return 1 + math.ceil(max_seconds * AUDIO_RATE) // HOP + 1


class _Slot:
    """One opened CU and its buffers, grown on demand (stages with larger outputs)."""

    def __init__(self, port: Port, spec: KernelSpec, name: str, cu):
        self.port, self.spec, self.name, self.cu = port, spec, name, cu
        self.bos: dict = {}

    def bo(self, arg: str, size: int):
        size = whole_beats(size)  # the kernels' 512-bit ports move whole 64-byte beats
        current = self.bos.get(arg)
        if current is None or self.port.size(current) < size:
            capacity = 1 << (size - 1).bit_length() if current is not None else size
            self.bos[arg] = self.port.buffer(self.cu, self.spec.index(arg), capacity)
        return self.bos[arg]

    def size(self, arg: str) -> int:
        return self.port.size(self.bos[arg])


QUARANTINE_S = 60.0
POLL_S = (20e-6, 1e-3)  # first and longest sleep between polls of a running command

log = logging.getLogger(__name__)


class _Pool:
    """Free items of one kind (CUs or hand-off buffers); retired items are not handed out again
    unless restored."""

    def __init__(self, kind: str, items: list):
        self.kind = kind
        self.names = [getattr(i, "name", kind) for i in items]
        self._free = deque(items)
        self._alive = len(items)
        self.retired: list[str] = []
        self._cond = threading.Condition()

    def acquire(self):
        with self._cond:
            while not self._free and self._alive:
                self._cond.wait()
            return self._free.popleft() if self._free else None

    def release(self, item) -> None:
        with self._cond:
            self._free.append(item)
            self._cond.notify()

    def retire(self, item) -> None:
        with self._cond:
            self._alive -= 1
            self.retired.append(item.name)
            self._cond.notify_all()

    def restore(self, item) -> None:
        with self._cond:
            self._alive += 1
            self.retired.remove(item.name)
            self._free.append(item)
            self._cond.notify()


class DpuDriver:
    def __init__(self, port: Port, manifest: Manifest, *, backend: str, cu_timeout_s: float = 5.0,
                 image_params: ImageParams = ImageParams(), max_audio_seconds: float = 30.0,
                 cu_counts: dict[str, int | None] | None = None, cu_share: tuple[int, int] = (0, 1)):
        self.port, self.backend = port, backend
        self.image_params = image_params
        self.max_audio_seconds = max_audio_seconds
        self.timeout_s = cu_timeout_s
        self.pools: dict[str, _Pool] = {}
        self.unopened: dict[str, str] = {}  # kernel -> why its CUs could not be opened
        for name, needed in KERNEL_ARGS.items():
            spec = manifest.kernel(name)
            spec.require(needed)
            count = (cu_counts or {}).get(name)
            if count is not None and not 0 <= count <= len(spec.cus):
                raise ValueError(f"{name}: {count} CUs asked for, the manifest has {len(spec.cus)}")
            mine = spec.cus[cu_share[0]::cu_share[1]]
            try:
                slots = [_Slot(port, spec, cu, port.open_cu(name, cu)) for cu in mine[:count]]
            except RuntimeError as exc:  # that kernel's requests go to the CPU, saying why
                self.unopened[name] = str(exc)
                slots = []
            self.pools[name] = _Pool(name, slots)
            self._preallocate(name, slots)
            if name == "audio_mel_cu":
                mel_slots = slots
        self._handoffs = _Pool("handoff", [self._handoff(mel_slots[0]) for _ in range(
            HANDOFFS_PER_MEL_CU * len(mel_slots))] if mel_slots else [])
        self._executors = {name: cf.ThreadPoolExecutor(max(1, len(pool.names)), f"dpu-{name}")
                           for name, pool in self.pools.items()}

    # -- buffers ----------------------------------------------------------------------------------

    def _preallocate(self, kernel: str, slots: list[_Slot]) -> None:
        p, frames = self.image_params, max_frames(self.max_audio_seconds)
        sizes = {
            "image_cu": {"jpeg": INITIAL_JPEG_BYTES, "scratch": scratch_bytes(p.max_dim),
                         "out": self._image_out_bytes(b"", "normalize")},
            "audio_mel_cu": {"pcm": 4 * int(self.max_audio_seconds * MAX_RATE)},
            "audio_norm_cu": {"out": 4 * N_MELS * frames},
        }[kernel]
        for slot in slots:
            for arg, size in {**sizes, "status": 4 * STATUS_WORDS}.items():
                slot.bo(arg, size)

    def _handoff(self, mel_slot: _Slot) -> _Slot:
        """A log-mel buffer in the mel CUs' memory, read by whichever norm CU comes next."""
        handoff = _Slot(self.port, mel_slot.spec, "handoff", mel_slot.cu)
        handoff.bo("mel", 4 * N_MELS * max_frames(self.max_audio_seconds))
        return handoff

    def _image_out_bytes(self, data: bytes, stage: str) -> int:
        p = self.image_params
        if stage == "normalize":
            return 3 * p.crop * p.crop * (2 if p.fp16 else 4)
        if stage == "crop":
            return 3 * p.crop * p.crop
        dims = jpeg_header.frame_size(data)
        if dims is None or max(dims) > p.max_dim:
            return 0  # the CU reports CORRUPT / TOO_LARGE without writing
        h, w = dims if stage == "decode" else resized_shape(*dims, p.resize_short)
        return 3 * h * w

    def _read(self, bo, dtype, shape: tuple[int, ...], out: np.ndarray | None = None) -> np.ndarray:
        """The buffer's contents as an array: a copy, or written into the start of `out` (a
        caller's buffer such as a shared-memory slot, in `out`'s dtype) and returned as that view."""
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        data = self.port.read(bo, n).view(dtype).reshape(shape)
        if out is None:
            return data.copy()
        dst = out.reshape(-1)[: data.size].reshape(shape)
        dst[...] = data
        return dst

    def _write(self, bo, data: np.ndarray) -> int:
        data = data.reshape(-1).view(np.uint8)[:self.port.size(bo)]
        self.port.write(bo, data)
        return data.size

    # -- running a CU -----------------------------------------------------------------------------

    def _no_cu(self, kernel: str) -> CuFailure:
        if kernel in self.unopened:
            return CuFailure(f"no {kernel} CU opened: {self.unopened[kernel]}")
        retired = self.pools[kernel].retired
        return CuFailure(f"no working {kernel} CU" + (f" ({', '.join(retired)} failed)" if retired else ""))

    @contextmanager
    def _using(self, kernel: str):
        pool = self.pools[kernel]
        slot = pool.acquire()
        if slot is None:
            raise self._no_cu(kernel)
        try:
            yield slot
        except CuFailure:
            raise
        except Exception as exc:  # XRT errors and inconsistent CU output: never reuse that CU
            pool.retire(slot)
            raise CuFailure(f"{slot.name} failed: {exc}") from exc
        pool.release(slot)

    def _execute(self, kernel: str, slot: _Slot, values: dict) -> np.ndarray:
        """Run one command on `slot`; returns its status words. A command that fails retires the
        CU; one that runs past the timeout puts it in quarantine."""
        self.port.write(values["status"], UNSET_STATUS)  # a CU that ends without writing is caught
        command = self.port.start(slot.cu, [values[arg.name] for arg in slot.spec.args])
        ended = self._await(command, time.monotonic() + self.timeout_s)
        if ended is None:
            self.pools[kernel].retire(slot)
            threading.Thread(target=self._quarantine, args=(kernel, slot, command), daemon=True,
                             name=f"{slot.name}-quarantine").start()  # fmt: skip
            raise CuFailure(f"{slot.name}: TIMEOUT (no end within {self.timeout_s:g} s)")
        if not ended.ok:
            self.pools[kernel].retire(slot)
            raise CuFailure(f"{slot.name}: {ended.what}")
        return self._read(values["status"], np.uint32, (STATUS_WORDS,))

    def _await(self, command, deadline: float) -> Ended | None:
        """The command's end, or None if it has not ended by `deadline` (monotonic seconds)."""
        pause = POLL_S[0]
        while (ended := self.port.ended(command)) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(pause, left))
            pause = min(2 * pause, POLL_S[1])
        return ended

    def _quarantine(self, kernel: str, slot: _Slot, command) -> None:
        """Back into service once the command that timed out has ended, if it ends within
        QUARANTINE_S; its output goes nowhere."""
        log.warning("%s: a command ran past %g s; the CU is out of service until it ends", slot.name,
                    self.timeout_s)  # fmt: skip
        ended = self._await(command, time.monotonic() + QUARANTINE_S)
        if ended is not None:
            self.pools[kernel].restore(slot)
            log.info("%s: its late command ended (%s); back in service", slot.name, ended.what)
        else:
            log.warning("%s: still busy after %g s; retired", slot.name, QUARANTINE_S)

    @staticmethod
    def _status(words: np.ndarray) -> Status:
        try:
            return Status(int(words[0]))
        except ValueError:
            raise RuntimeError(f"unknown status code {int(words[0])}") from None

    # -- image ------------------------------------------------------------------------------------

    def submit_image(self, data: bytes, stage: str = "normalize", out: np.ndarray | None = None) -> cf.Future:
        """Future[DpuOutput]; raises CuFailure through the future when no CU can run it. With `out`
        the normalised output is read from the CU's buffer straight into it (see `_read`)."""
        return self._executors["image_cu"].submit(self._image, data, stage, time.perf_counter(), out)

    def _image(self, data: bytes, stage: str, submitted: float, out: np.ndarray | None) -> DpuOutput:
        p = self.image_params
        with self._using("image_cu") as slot:
            started = time.perf_counter()
            jpeg = slot.bo("jpeg", len(data))
            self._write(jpeg, np.frombuffer(data, dtype=np.uint8))
            out_bo = slot.bo("out", self._image_out_bytes(data, stage))
            words = self._execute("image_cu", slot, {
                "jpeg": jpeg, "jpeg_len": len(data), "scratch": slot.bos["scratch"],
                "scratch_bytes": slot.size("scratch"), "out": out_bo, "out_bytes": self.port.size(out_bo),
                "status": slot.bos["status"], "stage": IMAGE_STAGE_CODES[stage],
                "resize_short": p.resize_short, "crop": p.crop, "out_fp16": int(p.fp16),
                "max_dim": p.max_dim})
            status = self._status(words)
            if status != Status.OK:
                return DpuOutput(status, self._image_reason(status, words))
            c, h, w, written = (int(x) for x in (words[1], words[2], words[3], words[7]))
            if stage == "normalize":
                dtype, shape = (np.float16 if p.fp16 else np.float32), (c, h, w)
            else:
                dtype, shape = np.uint8, (h, w, c)
            if written != np.prod(shape) * np.dtype(dtype).itemsize or written > self.port.size(out_bo):
                raise RuntimeError(f"status says {written} bytes for a {shape} {np.dtype(dtype)} output")
            array = self._read(out_bo, dtype, shape, out if stage == "normalize" else None)
            cu_ms = (time.perf_counter() - started) * 1e3
        return DpuOutput(Status.OK, "", array, {"queue_ms": (started - submitted) * 1e3, "cu_ms": cu_ms})

    def _image_reason(self, status: Status, words: np.ndarray) -> str:
        if status == Status.TOO_LARGE and words[4] and words[5]:
            return f"{int(words[5])}x{int(words[4])} exceeds the {self.image_params.max_dim} pixel limit"
        return REASONS.get(status, status.name)

    # -- audio ------------------------------------------------------------------------------------

    def submit_audio(self, pcm: np.ndarray, sample_rate: int, stage: str = "normalize",
                     out: np.ndarray | None = None) -> cf.Future:
        """Future[DpuOutput] of a mel CU run chained (for `normalize`) into a norm CU run; `out` as
        for images."""
        outer: cf.Future = cf.Future()
        pcm = np.asarray(pcm)
        if pcm.ndim != 1 or pcm.dtype not in (np.int16, np.float32):
            outer.set_result(DpuOutput(Status.BAD_ARGS,
                                       f"audio must be 1-D int16 or float32, got {pcm.dtype} {pcm.shape}"))
            return outer
        self._executors["audio_mel_cu"].submit(
            self._settle, outer, self._mel, outer, pcm, int(sample_rate), stage, time.perf_counter(), out)
        return outer

    @staticmethod
    def _settle(outer: cf.Future, fn, *args) -> None:
        try:
            fn(*args)
        except BaseException as exc:
            if not outer.done():
                outer.set_exception(exc)

    def _mel(self, outer: cf.Future, pcm: np.ndarray, rate: int, stage: str, submitted: float,
             out: np.ndarray | None) -> None:
        handoff = self._handoffs.acquire()
        if handoff is None:
            raise self._no_cu("audio_mel_cu")
        passed_on = False
        try:
            with self._using("audio_mel_cu") as slot:
                started = time.perf_counter()
                self._write(slot.bos["pcm"], pcm)
                words = self._execute("audio_mel_cu", slot, {
                    "pcm": slot.bos["pcm"], "n_samples": pcm.size,
                    "sample_format": int(pcm.dtype == np.float32), "sample_rate": rate,
                    "max_samples": int(self.max_audio_seconds * rate), "mel": handoff.bos["mel"],
                    "mel_capacity": handoff.size("mel") // 4, "status": slot.bos["status"]})
                status = self._status(words)
                frames = int(words[2])
                timings = {"queue_ms": (started - submitted) * 1e3,
                           "mel_cu_ms": (time.perf_counter() - started) * 1e3}
                if status != Status.OK:
                    outer.set_result(DpuOutput(status, REASONS.get(status, status.name)))
                elif stage == "mel":
                    mel = self._read(handoff.bos["mel"], np.float32, (N_MELS, frames), out)
                    outer.set_result(DpuOutput(Status.OK, "", mel, timings))
                else:
                    self._executors["audio_norm_cu"].submit(
                        self._settle, outer, self._norm, outer, handoff, frames, timings, out)
                    passed_on = True
        finally:
            if not passed_on:
                self._handoffs.release(handoff)

    def _norm(self, outer: cf.Future, handoff: _Slot, frames: int, timings: dict,
              out: np.ndarray | None) -> None:
        try:
            with self._using("audio_norm_cu") as slot:
                started = time.perf_counter()
                words = self._execute("audio_norm_cu", slot, {
                    "mel": handoff.bos["mel"], "n_frames": frames,
                    "out": slot.bos["out"], "status": slot.bos["status"]})
                status = self._status(words)
                if status != Status.OK:
                    outer.set_result(DpuOutput(status, REASONS.get(status, status.name)))
                    return
                array = self._read(slot.bos["out"], np.float32, (N_MELS, frames), out)
                timings = dict(timings, norm_cu_ms=(time.perf_counter() - started) * 1e3)
        finally:
            self._handoffs.release(handoff)
        outer.set_result(DpuOutput(Status.OK, "", array, timings))

    # -- state and lifetime -----------------------------------------------------------------------

    def cu_states(self) -> dict[str, str]:
        return {name: ("failed" if name in pool.retired else "ok")
                for pool in self.pools.values() for name in pool.names}

    def close(self) -> None:
        # Drain rather than cancel: every accepted request gets its answer (a hung CU costs at
        # most its timeout).
        for executor in self._executors.values():
            executor.shutdown(wait=True)
        self.port.close()


