"""Two steps of the CPU path in C (`native/host_kernels.cpp`), built with the C-simulation's
helper (`csim.compile_cached`) on first use and called through ctypes.

A front end's lanes preprocess beside its event loop in one process, so the Python a lane runs
per image is time the loop waits for the GIL, and the reverse. Two steps were most of it
(docs/benchmarks.md, "Issue #41: the lanes' GIL"): counting a JPEG's scans (a regular-expression
walk over the whole file, ~40 µs a web image, all of it holding the GIL) and the normalisation
(a split and three table lookups in OpenCV: four hand-backs of the GIL, ~85 µs). In C they
are one call each: the scan count (~6 µs) keeps the GIL, the normalisation (~60 µs) lets it go
once. They compute what the Python references compute (`jpeg_header.scan_count`,
`cpu_backend.normalize_bgr`'s table lookup), which is what the tests compare them against. Where
nothing can compile them, those references run instead, after one warning.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from pathlib import Path

import numpy as np

from fpga_host import csim, jpeg_header

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("native") / "host_kernels.cpp"
FLAGS = ("-O2", "-shared", "-fPIC", "-std=c++17")
BUILD_ROOT = csim.REPO_ROOT / "build" / "host_kernels"
LIBRARY_NAME = "libatoll_host.so"
SCAN_HELD_BELOW = 1 << 20  # bytes: a smaller file's scans are counted without letting the GIL go


@functools.cache
def library() -> tuple[ctypes.CDLL, ctypes.PyDLL] | None:
    """The built library, loaded twice: as a CDLL, whose calls release the GIL, for the steps
    long enough to be worth it, and as a PyDLL, whose calls keep it, for those too short to be
    (handing the GIL back and taking it again costs a wake-up behind the event loop); None (logged
    once) where it cannot be built."""
    try:
        path = str(csim.compile_cached([SOURCE], FLAGS, BUILD_ROOT, LIBRARY_NAME))
        released, held = ctypes.CDLL(path), ctypes.PyDLL(path)
    except (csim.CsimBuildError, OSError) as exc:
        log.warning("the CPU path's C steps could not be built; their Python versions run instead: %s", exc)
        return None
    size, ptr = ctypes.c_size_t, ctypes.c_void_p
    for lib in (released, held):  # ~6 µs a web image; a large file's walk lets the GIL go
        lib.atoll_jpeg_scan_count.argtypes = [ctypes.c_char_p, size, ctypes.c_int64]
        lib.atoll_jpeg_scan_count.restype = ctypes.c_int64
    released.atoll_normalize_bgr.argtypes = [ptr, size, size, size, ptr, ptr]  # ~60 µs a 224 x 224 image
    released.atoll_normalize_bgr.restype = None
    return released, held


def scan_count(data: bytes, stop_after: int) -> int:
    """`jpeg_header.scan_count(data, stop_after)`."""
    lib = library()
    if lib is None:
        return jpeg_header.scan_count(data, stop_after)
    data = data if isinstance(data, bytes) else bytes(data)
    return lib[len(data) < SCAN_HELD_BELOW].atoll_jpeg_scan_count(data, len(data), stop_after)


def normalize_bgr(bgr: np.ndarray, table: np.ndarray, dst: np.ndarray) -> bool:
    """`dst[c] = table[c][bgr[..., 2 - c]]` for an HWC uint8 `bgr` whose pixels are packed (rows
    may be apart: a crop) into a C-contiguous float32 `dst` (3, H, W), `table` (3, 256) float32;
    False, nothing written, where the C step is not built or the arrays are not laid out so."""
    lib = library()
    h, w = bgr.shape[:2]
    if (lib is None or bgr.dtype != np.uint8 or bgr.ndim != 3 or bgr.strides[1:] != (3, 1)
            or dst.dtype != np.float32 or dst.shape != (3, h, w) or not dst.flags.c_contiguous):
        return False
    lib[0].atoll_normalize_bgr(bgr.ctypes.data, h, w, bgr.strides[0], table.ctypes.data, dst.ctypes.data)
    return True
