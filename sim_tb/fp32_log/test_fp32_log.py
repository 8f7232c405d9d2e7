"""Testbench: hls/rtl/fp32_log.v is the natural logarithm of its C model, bit for bit.

References: the blackbox's C model hls/audio/fp32_log.cpp (fixed point, in the RTL's order),
which the audio CU's log-mel stage runs in C simulation, on 10^6 random operands (uniform positive
bit patterns, [0.5, 2) and the neighbourhood of 1, the log-mel's floor region 2^-24 (1 + k 2^-23),
subnormals, uniform 32-bit patterns of every sign and class) and every special class. The C model
itself equals glibc's extended-precision logl rounded to float32 on every one of them but the two
known exceptions below (1 ulp), and NumPy's float32 log to within 4 ulps (NumPy's SIMD log is not
correctly rounded).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from sim_tb.op_bulk.op_bulk import (SPECIALS, assert_same_bits, c_model, check_operator, f32, is_nan, random_count,
                                    uniform_bits)

UNIT = "fp32_log"
RANDOM_OPERANDS = random_count(1_000_000)
# The only float32 inputs whose logarithm the C model rounds the other way from logl (an exhaustive
# run over all 2^31 positive floats): just below 1, ln x sits within 2^-70 of a rounding tie and
# the 62-bit fixed-point sum is 1 ulp off.
LOGL_EXCEPTIONS = np.array([0x3F7FFFF4, 0x3F7FFFFE], dtype=np.uint32)
REPO = Path(__file__).resolve().parents[2]


def operands(rng: np.random.Generator) -> np.ndarray:
    eighth = RANDOM_OPERANDS // 8
    groups = [
        rng.integers(1, 0x7F800000, 3 * eighth, dtype=np.uint32),    # every positive finite
        rng.integers(0x3F000000, 0x40000000, eighth, dtype=np.uint32),  # [0.5, 2)
        rng.integers(0x3F7F0000, 0x3F810000, eighth, dtype=np.uint32),  # 1 +- 2^-8
        0x33800000 + rng.integers(0, 1 << 16, eighth, dtype=np.uint32),  # the log floor region
        rng.integers(1, 0x00800000, eighth, dtype=np.uint32),        # subnormals
        uniform_bits(rng, RANDOM_OPERANDS - 7 * eighth),
        SPECIALS,
    ]
    return np.concatenate(groups)


def long_double_log(x: np.ndarray) -> np.ndarray:
    """ln in x86 extended precision (NumPy's longdouble log is the C library's logl), then
    rounded to float32: the correctly rounded logarithm wherever the 64-bit result is not within
    2^-40 of a float32 rounding boundary."""
    with np.errstate(all="ignore"):
        return np.log(x.view(np.float32).astype(np.longdouble)).astype(np.float32).view(np.uint32)


def test_fp32_log(tmp_path):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    x = operands(np.random.default_rng(2020))
    want = c_model(UNIT, [x], 1)
    usual = ~np.isin(x, LOGL_EXCEPTIONS)
    assert_same_bits([want[0][usual]], [long_double_log(x[usual])], nan_payloads=False)
    finite = ~is_nan(want[0]) & (f32(x) > 0) & np.isfinite(f32(x))
    with np.errstate(all="ignore"):
        numpy_log = np.log(f32(x[finite])).view(np.int32).astype(np.int64)
    assert np.abs(numpy_log - want[0][finite].view(np.int32)).max() <= 4
    check_operator(UNIT, [x], want, tmp_path)
