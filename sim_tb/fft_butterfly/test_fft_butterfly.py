"""Testbench: hls/rtl/fft_butterfly.v is the audio FFT's radix-2 butterfly, bit for bit.

References: the butterfly evaluated with NumPy float32 in the C model's order (t = b * w with
tr = br*wr - bi*wi and ti = br*wi + bi*wr, then a + t and a - t; each operation rounded to nearest
even, subnormals, infinities, x86 NaN propagation) on 200 000 random butterflies (1.2 x 10^6
operands: uniform bit patterns; FFT-like values with unit twiddles; random exponents anywhere) and
every special class in every operand position (the others random), plus random mixes of special
operands; the blackbox's C model (hls/audio/fft_butterfly.cpp, -ffp-contract=off) must agree
with NumPy (a NaN result may carry either operand's payload: the compiler may commute them).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from sim_tb.op_bulk.op_bulk import SPECIALS, check_against_reference, f32, floats, random_count, uniform_bits, x86

UNIT = "fft_butterfly"
RANDOM_BUTTERFLIES = random_count(200_000)
SPECIAL_MIXES = 20_000
REPO = Path(__file__).resolve().parents[2]


def operands(rng: np.random.Generator) -> list[np.ndarray]:
    """Columns ar, ai, br, bi, wr, wi."""
    third = RANDOM_BUTTERFLIES // 3
    uniform = [uniform_bits(rng, third) for _ in range(6)]
    angles = rng.uniform(0, 2 * np.pi, third)
    values = [(rng.normal(0, 1, third) * np.exp2(rng.integers(-20, 20, third))).astype(np.float32).view(np.uint32)
              for _ in range(4)]
    fft_like = values + [np.cos(angles).astype(np.float32).view(np.uint32),
                         -np.sin(angles).astype(np.float32).view(np.uint32)]
    anywhere = [floats(rng, rng.integers(0, 256, RANDOM_BUTTERFLIES - 2 * third)) for _ in range(6)]
    n = len(SPECIALS)
    per_position = [floats(rng, rng.integers(100, 155, 6 * n)) for _ in range(6)]
    for k in range(6):
        per_position[k][k * n:(k + 1) * n] = SPECIALS
    mixes = [SPECIALS[rng.integers(0, n, SPECIAL_MIXES)] for _ in range(6)]
    groups = [uniform, fft_like, anywhere, per_position, mixes]
    return [np.concatenate([g[k] for g in groups]) for k in range(6)]


def reference(ar, ai, br, bi, wr, wi) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        tr = x86(np.subtract, x86(np.multiply, f32(br), f32(wr)), x86(np.multiply, f32(bi), f32(wi)))
        ti = x86(np.add, x86(np.multiply, f32(br), f32(wi)), x86(np.multiply, f32(bi), f32(wr)))
        outputs = [x86(np.add, f32(ar), tr), x86(np.add, f32(ai), ti), x86(np.subtract, f32(ar), tr),
                   x86(np.subtract, f32(ai), ti)]
    return [o.view(np.uint32) for o in outputs]


def test_fft_butterfly(tmp_path):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    columns = operands(np.random.default_rng(2019))
    check_against_reference(UNIT, columns, reference(*columns), tmp_path)
