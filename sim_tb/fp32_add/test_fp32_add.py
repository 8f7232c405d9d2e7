"""Testbench: hls/rtl/fp32_add.v is binary32 addition, bit for bit.

References: NumPy float32 addition (np.add on the host: round to nearest even, subnormals,
infinities, x86 NaN propagation) on 10^6 random operand pairs (uniform bit patterns, exponents
within 2 of each other for cancellation, every alignment up to 30 places, subnormal operands)
and every ordered pair of the special classes; the blackbox's C model (hls/audio/fp32_add.cpp,
C++ `a + b` with -ffp-contract=off) must agree with NumPy (a NaN result may carry either
operand's payload: the compiler may commute the operands).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from sim_tb.op_bulk.op_bulk import SPECIALS, check_against_reference, f32, floats, random_count, uniform_bits, x86

UNIT = "fp32_add"
RANDOM_PAIRS = random_count(1_000_000)
REPO = Path(__file__).resolve().parents[2]


def operands(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    quarter = RANDOM_PAIRS // 4
    ea = rng.integers(1, 255, 3 * quarter)
    close = ea[:quarter] + rng.integers(-2, 3, quarter)
    aligned = ea[quarter:2 * quarter] - rng.integers(0, 31, quarter)
    tiny_a, tiny_b = rng.integers(0, 5, quarter), rng.integers(0, 5, quarter)
    a = np.concatenate([uniform_bits(rng, quarter), floats(rng, ea[:2 * quarter]), floats(rng, tiny_a),
                        np.repeat(SPECIALS, len(SPECIALS))])
    b = np.concatenate([uniform_bits(rng, quarter), floats(rng, np.concatenate([close, aligned])),
                        floats(rng, tiny_b), np.tile(SPECIALS, len(SPECIALS))])
    return a, b


def test_fp32_add(tmp_path):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    a, b = operands(np.random.default_rng(2016))
    with np.errstate(all="ignore"):
        want = x86(np.add, f32(a), f32(b)).view(np.uint32)
    check_against_reference(UNIT, [a, b], [want], tmp_path)
