"""The jpeg_mcu_strip unit's C model and today's frame-store path on JPEG files (strip_ref.cpp via ctypes).

`frame_store_columns` is what image_cu feeds upsample_color today (decode_scan, then
emit_upsample_columns); `chain` is jpeg_decode_core's C model followed by jpeg_mcu_strip's, with
the rows between them (the RTL unit's input); `datapath` all four units' C models in a chain. `meaningful` masks the lane bytes upsample_color
never reads (the frame-store path leaves them stale).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim_tb.c_model import HLS, build_shared_library

HERE = Path(__file__).resolve().parent
BUILD = HERE.parents[1] / "build" / "sim_tb" / "jpeg_mcu_strip"
STRIP_SOURCES = [HLS / "image" / "jpeg_mcu_strip.cpp", HLS / "image" / "jpeg_decode_core.cpp",
                 HLS / "image" / "idct8x8_islow.cpp", HLS / "image" / "upsample_color.cpp",
                 HLS / "image" / "image_postdecode.cpp"]


@dataclass
class StripArgs:
    width: int
    height: int
    sampling: int
    n_components: int
    mode: int
    rows: int  # sample rows the unit reads

    @property
    def beats(self) -> int:
        return self.height * ((self.width + 1) // 2)


def _library() -> ctypes.CDLL:
    headers = [*(HLS / "image").glob("*.h"), *(HLS / "common").glob("*.h")]
    return ctypes.CDLL(str(build_shared_library([HERE / "strip_ref.cpp", *STRIP_SOURCES], headers, BUILD / "ref",
                                                "strip_ref")))


def _pointer(a: np.ndarray) -> ctypes.c_void_p:
    return a.ctypes.data_as(ctypes.c_void_p)


def strip_args(jpeg: bytes) -> StripArgs | None:
    """The unit's arguments for the file, None where its headers do not parse."""
    args = np.zeros(6, np.uint32)
    if _library().strip_ref_args(jpeg, ctypes.c_uint32(len(jpeg)), _pointer(args)):
        return None
    return StripArgs(*map(int, args))


def frame_store_columns(jpeg: bytes, args: StripArgs) -> tuple[int, np.ndarray]:
    """Status and column beats (n, 3) uint32 of decode_scan + emit_upsample_columns."""
    out = np.zeros((max(args.beats, 1), 3), np.uint32)
    n = ctypes.c_uint64()
    status = _library().strip_ref_frame_store(jpeg, ctypes.c_uint32(len(jpeg)), _pointer(out),
                                              ctypes.c_uint64(args.beats), ctypes.byref(n))
    return status, out[:n.value]


def chain(jpeg: bytes, args: StripArgs) -> tuple[int, np.ndarray, np.ndarray]:
    """Status, the core's sample rows (n, 8) uint8 and the strip's column beats (n, 3) uint32."""
    rows = np.zeros((max(args.rows, 1), 8), np.uint8)
    out = np.zeros((max(args.beats, 1), 3), np.uint32)
    n = ctypes.c_uint64()
    status = _library().strip_ref_chain(jpeg, ctypes.c_uint32(len(jpeg)), _pointer(rows),
                                        ctypes.c_uint64(args.rows), _pointer(out), ctypes.c_uint64(args.beats),
                                        ctypes.byref(n))
    return status, rows[:args.rows], out[:n.value]


def datapath(jpeg: bytes, post: tuple[int, int, int, int, int]) -> tuple[int, np.ndarray]:
    """The core's status and the four chained C models' output beats (n, 3) uint32 for the
    post-decode arguments (dst_h, dst_w, crop_h, crop_w, format)."""
    post_args = np.array(post, np.uint32)
    max_beats = post[2] * post[3]
    out = np.zeros((max(max_beats, 1), 3), np.uint32)
    n = ctypes.c_uint64()
    status = _library().strip_ref_datapath(jpeg, ctypes.c_uint32(len(jpeg)), _pointer(post_args), _pointer(out),
                                           ctypes.c_uint64(max_beats), ctypes.byref(n))
    return status, out[:n.value]


def synthetic(width: int, height: int, factors: list[tuple[int, int]], seed: int) -> tuple[StripArgs, np.ndarray]:
    """Arguments and random sample rows for a frame of any sampling factors ((h, v) per component),
    including those no encoder here writes (e.g. luma 1x2 with chroma 2x1)."""
    hmax, vmax = max(h for h, _ in factors), max(v for _, v in factors)
    sampling = sum(((h == 2) | (v == 2) << 1) << (2 * c) for c, (h, v) in enumerate(factors))
    mode = sum(((h < hmax) | (v < vmax) << 1) << (2 * c) for c, (h, v) in enumerate(factors))
    mode |= 1 << 6 if len(factors) == 1 else 0
    mcus = -(-width // (8 * hmax)) * -(-height // (8 * vmax))
    n_rows = mcus * sum(h * v for h, v in factors) * 8
    rows = np.random.default_rng(seed).integers(0, 256, (n_rows, 8), dtype=np.uint8)
    return StripArgs(width, height, sampling, len(factors), mode, n_rows), rows


def strip_only(args: StripArgs, rows: np.ndarray) -> np.ndarray:
    """jpeg_mcu_strip's C model alone on the rows: column beats (n, 3) uint32."""
    rows = np.ascontiguousarray(rows, np.uint8)
    out = np.zeros((max(args.beats, 1), 3), np.uint32)
    n = ctypes.c_uint64()
    _library().strip_ref_rows(_pointer(rows), ctypes.c_uint64(len(rows)), *map(ctypes.c_uint32, (
        args.width, args.height, args.sampling, args.n_components, args.mode)), _pointer(out),
        ctypes.c_uint64(args.beats), ctypes.byref(n))
    return out[:n.value]


def lane_masks(args: StripArgs) -> np.ndarray:
    """Per lane, the bytes upsample_color reads: near a and b, far only where vertically subsampled."""
    masks = np.zeros(3, np.uint32)
    for c in range(args.n_components):
        masks[c] = 0xFFFFFFFF if args.mode >> (2 * c + 1) & 1 else 0x0000FFFF
    return masks


def meaningful(beats: np.ndarray, args: StripArgs) -> np.ndarray:
    return beats & lane_masks(args)
