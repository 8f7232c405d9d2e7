"""Testbench: hls/rtl/mel_mac.v is acc + w * p in binary32 with two roundings, bit for bit.

References: NumPy float32 `acc + w * p` (np.multiply, then np.add: each rounded to nearest even,
subnormals, infinities, x86 NaN propagation) on 350 000 random operand triples (over 10^6
operands: uniform bit patterns; the filterbank's own ranges, weights up to 0.05, powers over 60
octaves, non-negative accumulators; accumulators cancelling the product to a few ulps; random
exponents anywhere) and every triple of the special classes; the blackbox's C model
(hls/audio/mel_mac.cpp, C++ `acc + w * p` with -ffp-contract=off) must agree with NumPy (a
NaN result may carry either operand's payload: the compiler may commute the operands).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from sim_tb.op_bulk.op_bulk import SPECIALS, check_against_reference, f32, floats, random_count, uniform_bits, x86

UNIT = "mel_mac"
RANDOM_TRIPLES = random_count(350_000)
REPO = Path(__file__).resolve().parents[2]


def operands(rng: np.random.Generator) -> list[np.ndarray]:
    quarter = RANDOM_TRIPLES // 4
    uniform = [uniform_bits(rng, quarter) for _ in range(3)]
    weights = rng.uniform(0, 0.05, quarter).astype(np.float32)
    powers = (rng.uniform(0, 1, quarter) * np.exp2(rng.uniform(-40, 20, quarter))).astype(np.float32)
    sums = (rng.uniform(0, 1, quarter) * np.exp2(rng.uniform(-40, 20, quarter))).astype(np.float32)
    filterbank = [sums.view(np.uint32), weights.view(np.uint32), powers.view(np.uint32)]
    w, p = floats(rng, rng.integers(100, 155, quarter)), floats(rng, rng.integers(100, 155, quarter))
    product = (f32(w) * f32(p)).view(np.uint32)
    cancelling = [(product ^ 0x80000000) + rng.integers(-3, 4, quarter).astype(np.uint32), w, p]
    anywhere = [floats(rng, rng.integers(0, 256, quarter)) for _ in range(3)]
    n = len(SPECIALS)
    specials = [np.repeat(SPECIALS, n * n), np.tile(np.repeat(SPECIALS, n), n), np.tile(SPECIALS, n * n)]
    groups = [uniform, filterbank, cancelling, anywhere, specials]
    return [np.concatenate([g[k] for g in groups]) for k in range(3)]


def test_mel_mac(tmp_path):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    acc, w, p = operands(np.random.default_rng(2018))
    with np.errstate(all="ignore"):
        want = x86(np.add, f32(acc), x86(np.multiply, f32(w), f32(p))).view(np.uint32)
    check_against_reference(UNIT, [acc, w, p], [want], tmp_path)
