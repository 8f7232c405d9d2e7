"""The float64 expressions the DPU replaces with integer or float32 arithmetic agree with the
references bit for bit (OpenCV's resize coordinate, librosa's resampled length)."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest

from sim_tb.c_model import build_shared_library

HLS = Path(__file__).resolve().parents[2] / "hls"
SOURCES = sorted(p for p in HLS.rglob("*") if p.suffix in (".h", ".cpp"))


@pytest.fixture(scope="module")
def replacements():
    """The float64 replacements compiled with their references (sim_tb/c_model.py's cached build)."""
    sys.path.insert(0, str(HLS.parent))

    here = Path(__file__).resolve().parent
    lib = ctypes.CDLL(str(build_shared_library(
        [here / "float64_replacements.cpp"], SOURCES, HLS.parent / "build" / "sim_tb" / "hygiene", "float64")))
    for name in ("resize_coordinate_mismatches", "resampled_length_mismatches"):
        getattr(lib, name).restype = ctypes.c_long
        getattr(lib, name).argtypes = [ctypes.c_uint32] * 3 + [ctypes.POINTER(ctypes.c_long)]
    return lib


def test_resize_coordinate_is_opencvs_float64_expression(replacements):
    """hls/image/resize.h's integer resize coordinate equals (float)((d + 0.5) * scale - 0.5) with
    scale = 1.0 / ((double)dst / src), OpenCV's float64 expression, bit for bit: every (src, dst)
    up to 100, 300 random pairs up to 8192 and 300 with dst a multiple of 2048 (float32 ties)."""
    compared = ctypes.c_long()
    assert replacements.resize_coordinate_mismatches(100, 300, 16, ctypes.byref(compared)) == 0
    assert compared.value > 3_000_000


def test_resampled_length_is_librosas_float64_expression(replacements):
    """hls/audio/resampler.h's resampled_length equals librosa's ceil(n * (16000 / rate)) in
    float64 at every rate 8..48 kHz, on the lengths where the float64 rounding decides it."""
    compared = ctypes.c_long()
    assert replacements.resampled_length_mismatches(40, 20, 16, ctypes.byref(compared)) == 0
    assert compared.value == 40001 * 60
