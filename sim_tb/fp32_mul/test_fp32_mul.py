"""Testbench: hls/rtl/fp32_mul.v is binary32 multiplication, bit for bit.

References: NumPy float32 multiplication (np.multiply on the host: round to nearest even,
subnormals, infinities, x86 NaN propagation) on 10^6 random operand pairs (uniform bit patterns,
products in the normal range, products around the subnormal range and underflow, products around
overflow) and every ordered pair of the special classes; the blackbox's C model
(hls/audio/fp32_mul.cpp, C++ `a * b` with -ffp-contract=off) must agree with NumPy (a NaN result
may carry either operand's payload: the compiler may commute the operands).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from sim_tb.op_bulk.op_bulk import SPECIALS, check_against_reference, f32, floats, random_count, uniform_bits, x86

UNIT = "fp32_mul"
RANDOM_PAIRS = random_count(1_000_000)
REPO = Path(__file__).resolve().parents[2]


def operands(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Exponent-field sums (biased: 127 means a product near 1) chosen per region."""
    quarter = RANDOM_PAIRS // 4
    ea = rng.integers(0, 255, 3 * quarter)
    sums = np.concatenate([rng.integers(107, 148, quarter),   # normal products
                           rng.integers(-30, 6, quarter),     # subnormal products and underflow
                           rng.integers(250, 258, quarter)])  # around the largest finite value
    eb = sums + 127 - ea
    a = np.concatenate([uniform_bits(rng, quarter), floats(rng, ea), np.repeat(SPECIALS, len(SPECIALS))])
    b = np.concatenate([uniform_bits(rng, quarter), floats(rng, eb), np.tile(SPECIALS, len(SPECIALS))])
    return a, b


def test_fp32_mul(tmp_path):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    a, b = operands(np.random.default_rng(2017))
    with np.errstate(all="ignore"):
        want = x86(np.multiply, f32(a), f32(b)).view(np.uint32)
    check_against_reference(UNIT, [a, b], [want], tmp_path)
