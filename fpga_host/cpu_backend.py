"""Reference CPU preprocessing (OpenCV, librosa) and the process pool that runs it.

These functions are the numerics the DPU is measured against (ARCHITECTURE §4.1, §4.2) and the path
used when no CU can take a request. They are module-level so a `spawn` process pool can pickle them.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import cv2
import numpy as np
from threadpoolctl import threadpool_limits

from fpga_host import host_kernels, jpeg_header
from fpga_host.status import PreprocessError, Status, reason_of

log = logging.getLogger(__name__)
IMAGE_STAGES = ("decode", "resize", "crop", "normalize")
AUDIO_STAGES = ("mel", "normalize")

HUFFMAN_PROCESSES = (0, 1, 2)  # SOF0 baseline, SOF1 extended, SOF2 progressive
MAX_RESIZED_SIDE = 8192  # the DPU's widest line (hls/image/image_types.h kMaxDim)

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)

AUDIO_RATE = 16000
MIN_RATE, MAX_RATE = 8000, 48000
MEL_PARAMS = dict(sr=AUDIO_RATE, n_fft=512, hop_length=160, win_length=400, window="hann",
                  center=True, pad_mode="constant", power=2.0, n_mels=80, fmin=0, fmax=8000,
                  htk=False, norm="slaney")
LOG_FLOOR = 2.0 ** -24
NORM_EPS = 1e-5


@dataclass(frozen=True)
class ImageParams:
    resize_short: int = 256
    crop: int = 224
    fp16: bool = False
    max_dim: int = 8192
    max_scans: int = 64


def resized_shape(h: int, w: int, short: int) -> tuple[int, int]:
    """(height, width) with the shorter side at `short`, the longer `int(short * long / short_side)`."""
    if h <= w:
        return short, int(short * w / h)
    return int(short * h / w), short


def crop_offsets(h: int, w: int, crop: int) -> tuple[int, int]:
    """torchvision CenterCrop offsets."""
    return int(round((h - crop) / 2)), int(round((w - crop) / 2))


def image_size(data: bytes, max_dim: int, max_scans: int) -> tuple[int, int]:
    """(height, width) of a JPEG from its markers, refusing what no decode should start on, since
    OpenCV decodes whatever a file claims and fills in what it lacks (what each cost: docs/robustness.md):
    - no readable frame header, or fewer bytes than one bit per 8x8 block (the least a whole
      Huffman-coded file holds): CORRUPT;
    - a side over `max_dim`: TOO_LARGE;
    - a coding process other than baseline, extended or progressive Huffman (arithmetic coding
      would make the byte bound void; the DPU decodes baseline only, the CPU progressive too), or
      more than `max_scans` scans (each a pass over the whole image): UNSUPPORTED."""
    f = jpeg_header.frame(data)
    if f is None:
        raise PreprocessError(Status.CORRUPT, "not a JPEG file with a readable frame header")
    if max(f.height, f.width) > max_dim:
        raise PreprocessError(Status.TOO_LARGE, f"{f.width}x{f.height} exceeds the {max_dim} pixel limit")
    if f.process not in HUFFMAN_PROCESSES:
        raise PreprocessError(Status.UNSUPPORTED, f"JPEG coding process SOF{f.process} is not supported (baseline, "
                                                  "extended and progressive Huffman coding are)")  # fmt: skip
    if 8 * len(data) < f.blocks():
        raise PreprocessError(Status.CORRUPT, f"a {f.width}x{f.height} JPEG codes {f.blocks()} blocks, at least a bit "
                                              f"each, but the file has {len(data)} bytes: it is truncated")  # fmt: skip
    if host_kernels.scan_count(data, max_scans) > max_scans:
        raise PreprocessError(Status.UNSUPPORTED, f"a JPEG of more than {max_scans} scans (each progressive "
                                                  "scan is a pass over the whole image)")  # fmt: skip
    return f.height, f.width


def resized_size(h: int, w: int, short: int) -> tuple[int, int]:
    """`resized_shape`, refused (TOO_LARGE) past the DPU's line buffers as the DPU refuses it: a
    tiny file of an extreme aspect ratio would otherwise resize to gigabytes."""
    rh, rw = resized_shape(h, w, short)
    if max(rh, rw) > MAX_RESIZED_SIDE:
        raise PreprocessError(Status.TOO_LARGE, f"{w}x{h} resized to a shorter side of {short} would be {rw}x{rh}, "
                                                f"over the {MAX_RESIZED_SIDE} pixel limit")  # fmt: skip
    return rh, rw


def image(data: bytes, stage: str = "normalize", params: ImageParams = ImageParams(),
          out: np.ndarray | None = None, checked: bool = False) -> np.ndarray:
    """JPEG bytes -> the array after `stage` (see IMAGE_STAGES); the size is checked from the
    header first (`image_size`), as the DPU does, so no input makes the decode a bomb.

    With `out` (a float32 buffer at least as large as the result, e.g. a shared-memory slot) the
    normalised image is written into its start and that view is returned; float16 values are then
    stored widened. Decode, resize and crop run on OpenCV's BGR order and the channels are swapped
    by the last step, which is exact because every step treats channels alike. `checked`: the
    caller has run `image_size` on `data` with `params`' limits (a front end does, for a whole
    request, before queueing it; counting a file's scans costs ~4 % of its preprocessing).
    """

    if stage not in IMAGE_STAGES:
        raise ValueError(f"unknown image stage {stage!r}; expected one of {IMAGE_STAGES}")
    if not checked:
        image_size(data, params.max_dim, params.max_scans)
    bgr = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
    if bgr is None:
        raise PreprocessError(Status.CORRUPT, "OpenCV could not decode the image")
    h, w = bgr.shape[:2]
    if stage == "decode":
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    rh, rw = resized_size(h, w, params.resize_short)
    resized = cv2.resize(bgr, (rw, rh), interpolation=cv2.INTER_LINEAR)
    if stage == "resize":
        return cv2.cvtColor(resized, cv2.COLOR_BGR2RGB)
    top, left = crop_offsets(rh, rw, params.crop)
    cropped = resized[top:top + params.crop, left:left + params.crop]
    if stage == "crop":
        return cv2.cvtColor(cropped, cv2.COLOR_BGR2RGB)
    return normalize_bgr(cropped, params.fp16, out)


@functools.cache
def _normalize_table(fp16: bool) -> np.ndarray:
    """(3, 256) float32: `(v / 255 - mean[c]) / std[c]` for every byte v, evaluated in float32
    exactly as the per-pixel expression is (so a lookup equals it bit for bit), rounded through
    float16 when the output is float16."""
    v = np.arange(256, dtype=np.float32)[None, :]
    table = (v / np.float32(255) - IMAGENET_MEAN[:, None]) / IMAGENET_STD[:, None]
    return table.astype(np.float16).astype(np.float32) if fp16 else table


def normalize_bgr(bgr: np.ndarray, fp16: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    """HWC uint8 BGR -> CHW RGB ImageNet-normalised, one table lookup per byte (ARCHITECTURE 4.1)."""
    h, w = bgr.shape[:2]
    dst = np.empty((3, h, w), np.float32) if out is None else out.reshape(-1)[: 3 * h * w].reshape(3, h, w)
    table = _normalize_table(fp16)
    if not host_kernels.normalize_bgr(bgr, table, dst):  # the C step (one call, the GIL released) or OpenCV's
        for c, plane in enumerate(reversed(cv2.split(bgr))):
            written = cv2.LUT(plane, table[c].reshape(256, 1), dst=dst[c])
            if not np.shares_memory(written, dst[c]):
                dst[c] = written  # OpenCV chose its own buffer (`out` is not float32)
    return dst.astype(np.float16) if fp16 and out is None else dst


def pcm_to_float(pcm: np.ndarray) -> np.ndarray:
    """int16 or float32 mono PCM -> float32 in [-1, 1) (int16 scaled by 1/32768)."""
    pcm = np.asarray(pcm)
    if pcm.ndim != 1:
        raise PreprocessError(Status.BAD_ARGS, f"audio must be mono (1-D), got shape {pcm.shape}")
    if pcm.dtype == np.int16:
        return pcm.astype(np.float32) / np.float32(32768)
    if pcm.dtype == np.float32:
        return pcm
    raise PreprocessError(Status.BAD_ARGS, f"audio samples must be int16 or float32, got {pcm.dtype}")


def validate_length(samples: int, sample_rate: int, max_seconds: float) -> None:
    """Refuse a rate outside 8-48 kHz, no samples, or more than `max_seconds` (callers with a file
    header check it before decoding: the decoder allocates what the header claims)."""
    if not MIN_RATE <= sample_rate <= MAX_RATE:
        raise PreprocessError(Status.BAD_RATE,
                              f"sample rate {sample_rate} Hz outside {MIN_RATE}..{MAX_RATE} Hz")
    if samples == 0:
        raise PreprocessError(Status.EMPTY, "audio has no samples")
    if samples > max_seconds * sample_rate:
        raise PreprocessError(Status.TOO_LONG,
                              f"{samples / sample_rate:.2f} s exceeds the {max_seconds:g} s limit")


def validate_audio(y: np.ndarray, sample_rate: int, max_seconds: float) -> None:
    validate_length(y.size, sample_rate, max_seconds)
    if not np.isfinite(y).all():
        raise PreprocessError(Status.NON_FINITE, "audio contains NaN or infinite samples")


def audio(pcm: np.ndarray, sample_rate: int, stage: str = "normalize", max_seconds: float = 30.0,
          out: np.ndarray | None = None) -> np.ndarray:
    """Mono PCM -> (80, T) float32 log-mel (`mel`) or per-feature normalised log-mel (`normalize`).
    With `out` (a float32 buffer at least as large as the result) the result is written into its
    start and that view is returned."""
    import librosa  # heavy: librosa loads numba, paid only where audio is used

    if stage not in AUDIO_STAGES:
        raise ValueError(f"unknown audio stage {stage!r}; expected one of {AUDIO_STAGES}")
    y = pcm_to_float(pcm)
    validate_audio(y, sample_rate, max_seconds)
    if sample_rate != AUDIO_RATE:
        y = librosa.resample(y, orig_sr=sample_rate, target_sr=AUDIO_RATE)
    if y.size < 2:  # pre-emphasis needs a previous sample (scipy's own refusal named its filter state)
        raise PreprocessError(Status.EMPTY, f"audio of {y.size} sample(s) at {AUDIO_RATE} Hz; at least 2 are needed")
    y = librosa.effects.preemphasis(y, coef=0.97)
    mel = np.log(librosa.feature.melspectrogram(y=y, **MEL_PARAMS) + LOG_FLOOR)
    dst = mel if out is None else out.reshape(-1)[: mel.size].reshape(mel.shape)
    if stage == "mel":
        if out is not None:
            dst[...] = mel
        return dst
    if mel.shape[1] < 2:
        raise PreprocessError(Status.EMPTY, "audio shorter than two 10 ms frames cannot be normalised")
    mean = mel.mean(axis=1, keepdims=True)
    std = mel.std(axis=1, ddof=1, keepdims=True)
    np.subtract(mel, mean, out=dst)
    return np.divide(dst, std + NORM_EPS, out=dst)


def timed(fn, *args) -> tuple[np.ndarray, float]:
    """Run `fn(*args)` and return (result, seconds): the compute time as seen inside the worker."""
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def init_worker(audio_too: bool = True) -> None:
    """Initializer of a CPU preprocessing process (the pool's workers, the server's front ends, the
    plain baseline server's):
    one core per worker, and (`audio_too`) librosa's first-call caches built before any request:
    ~4 s of imports, which a process serving no audio model leaves to `warm_audio` when one comes.

    One core means one thread in every native pool too. NumPy's OpenBLAS starts a thread per core in
    every process, and librosa's mel filterbank product (an `einsum` lowered to sgemm) wakes them:
    P workers then run P x cores spinning BLAS threads on P cores, and audio got slower with more
    workers (figures: docs/benchmarks.md, Preprocessing).
    """
    cv2.setNumThreads(1)
    host_kernels.library()  # built (once per tree) before any request, not by the first
    if audio_too:
        warm_audio()
    else:
        threadpool_limits(limits=1)


def warm_audio() -> None:
    """librosa's first-call caches, then one thread in every native pool loaded so far."""
    audio(np.zeros(8000, dtype=np.float32), 8000)
    # after the warm-up call, which loads librosa's BLAS and OpenMP libraries: the cap applies
    # to the libraries loaded so far
    threadpool_limits(limits=1)


class CpuPool:
    """The CPU path: a `spawn` process pool of `workers` processes, or, with 0, the caller's own
    thread (the server's front ends call it from their preprocessing lanes). A pool broken by a
    worker's death (SIGKILL, OOM) is replaced, and the requests it lost run once more on the new
    one: one dead process must not fail every later request."""

    def __init__(self, workers: int):
        self.workers = workers
        self._executor: cf.Executor | None = None
        self._lock = threading.Lock()
        self.warming: list[cf.Future] = []
        if workers > 0:
            self._executor = self._start()
            # Start (and warm) every worker now, in the background, so the first request, often
            # a fallback from the DPU, does not pay for process start-up and librosa's first call.
            # A server waits on `warming` before it reports ready.
            self.warming = [self._executor.submit(int) for _ in range(workers)]

    def _start(self) -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                      initializer=init_worker)  # fmt: skip

    def image(self, data: bytes, stage: str, params: ImageParams, out: np.ndarray | None = None,
              checked: bool = False) -> cf.Future:
        """Future of (array, compute seconds); `out` only in the caller's thread (workers=0)."""
        return self._submit(functools.partial(image, checked=checked) if checked else image, data, stage, params, out)

    def audio(self, pcm: np.ndarray, sample_rate: int, stage: str, max_seconds: float,
              out: np.ndarray | None = None) -> cf.Future:
        return self._submit(audio, pcm, sample_rate, stage, max_seconds, out)

    def _submit(self, fn, *args) -> cf.Future:
        future: cf.Future = cf.Future()
        if self._executor is None:
            try:
                future.set_result(timed(fn, *args))
            except Exception as exc:  # PreprocessError and the like reach the caller through the future
                future.set_exception(exc)
            return future
        if args[-1] is not None:
            raise ValueError("a process pool cannot write into the caller's buffer")
        self._run(future, fn, args[:-1], retries=1)
        return future

    def _run(self, outer: cf.Future, fn, args: tuple, retries: int) -> None:
        executor = self._executor
        try:
            inner = executor.submit(timed, fn, *args)
        except BrokenProcessPool:
            inner = self._replace(executor).submit(timed, fn, *args)

        def done(f: cf.Future) -> None:
            error = f.exception()
            if isinstance(error, BrokenProcessPool) and retries:
                self._replace(executor)
                self._run(outer, fn, args, retries - 1)
            elif error is not None:
                outer.set_exception(error)
            else:
                outer.set_result(f.result())

        inner.add_done_callback(done)

    def _replace(self, broken: cf.Executor) -> cf.Executor:
        """A new pool in place of `broken` (once, however many of its requests notice)."""
        with self._lock:
            if self._executor is broken:
                log.warning("a CPU preprocessing process died; starting a new pool of %d", self.workers)
                broken.shutdown(wait=False)
                self._executor = self._start()
            return self._executor

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)  # drain: accepted requests are answered


def probe_cpu(_manifest=None) -> dict:
    """Never raises: whether OpenCV and librosa import here."""
    try:
        import librosa  # heavy: librosa loads numba, paid only where audio is used
    except Exception as exc:
        return {"available": False, "reason": reason_of(exc)}
    return {"available": True, "cores": os.cpu_count(), "opencv": cv2.__version__,
            "librosa": librosa.__version__}
