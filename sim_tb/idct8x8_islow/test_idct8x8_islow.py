"""cocotb testbench: hls/rtl/idct8x8_islow.v is bit-exact with atoll_image::idct_islow.

Reference: the C++ the image CU itself runs (hls/image/jpeg_idct.h, libjpeg's islow arithmetic),
compiled with g++ behind idct_ref.cpp and called through ctypes; for the blackbox's default
parameters also through the blackbox C model (hls/image/idct8x8_islow.cpp), which must agree.
The pytest function at the bottom builds and runs this on Icarus Verilog for each parameter set.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import sys
from pathlib import Path

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from scipy.fft import dctn

from sim_tb.c_model import build_shared_library
from sim_tb.cocotb_run import random_pauses, run_testbench

UNIT = "idct8x8_islow"
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

# Cycles from the first input beat of a block to its last output beat, and between blocks, when
# neither stream stalls: the blackbox descriptor's figures, which the simulation must confirm.
_PERFORMANCE = json.loads((REPO / "hls" / "rtl" / f"{UNIT}.json").read_text())["rtl_performance"]
LATENCY_CYCLES = int(_PERFORMANCE["latency"])
II_CYCLES = int(_PERFORMANCE["II"])


class Config:
    """The HDL parameters of the build under test (passed as TB_* environment variables)."""

    def __init__(self) -> None:
        self.coef_width = int(os.environ["TB_COEF_WIDTH"])
        self.quant_width = int(os.environ["TB_QUANT_WIDTH"])
        self.dequant = int(os.environ["TB_DEQUANT"]) == 1
        self.datapath_width = int(os.environ["TB_DATAPATH_WIDTH"])
        self.lane_width = self.coef_width + self.quant_width if self.dequant else self.coef_width
        # idct_islow takes int16 coefficients and uint16 steps; a dequantised input lane is
        # coef * quant, so quant is 1 where the lane is too narrow for a product.
        self.coef_bits = min(self.coef_width, 16)
        if self.dequant:
            self.max_quant = (1 << self.quant_width) - 1
        else:
            self.max_quant = 0xFFFF if self.coef_width >= 32 else 1


def make_blocks(cfg: Config, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Coefficient and quantisation blocks (natural order, shape (n, 64)) and which are hostile.

    Legal blocks are JPEG data: the forward DCT (JPEG's FDCT is the orthonormal 2-D DCT-II) of
    8x8 pixel patches, quantised with 8-bit tables that grow with frequency: flat patches give
    DC-only blocks, smooth ones under coarse tables sparse low-frequency AC, textured ones under
    fine tables full blocks. Hostile blocks cover the whole input range (random coefficients and
    steps, huge DC-only and AC-free columns, extremes), where a 32-bit datapath wraps.
    """
    lo, hi = -(1 << (cfg.coef_bits - 1)), (1 << (cfg.coef_bits - 1)) - 1
    max_table = min(cfg.max_quant, 255)
    freq = np.add.outer(np.arange(8), np.arange(8)).reshape(64)
    y, x = np.mgrid[0:8, 0:8]

    def jpeg_blocks(n: int, slope: float, noise: float, step: tuple[float, float]):
        patches = (
            rng.uniform(0, 255, (n, 1, 1))
            + rng.uniform(-slope, slope, (n, 1, 1)) * x
            + rng.uniform(-slope, slope, (n, 1, 1)) * y
            + rng.normal(0, noise, (n, 8, 8))
        )
        spectra = dctn(np.clip(patches, 0, 255) - 128, axes=(1, 2), norm="ortho").reshape(n, 64)
        table = np.clip(np.rint(rng.uniform(*step, (n, 1)) * (1 + freq / 2)), 1, max_table)
        return np.clip(np.rint(spectra / table), lo, hi), table

    flat = jpeg_blocks(32, 0, 0, (1, 16))
    smooth = jpeg_blocks(32, 12, 0, (8, 40))
    textured = jpeg_blocks(64, 20, 25, (1, 4))

    def full_range(n: int):
        return rng.integers(lo, hi, (n, 64), endpoint=True), rng.integers(1, cfg.max_quant, (n, 64), endpoint=True)

    random_full = full_range(64)
    random_small = (rng.integers(-64, 64, (32, 64), endpoint=True), full_range(32)[1])
    dc_huge = full_range(16)
    dc_huge[0][:, 1:] = 0
    ac_free_columns = full_range(16)  # about half the columns of each block have no AC input
    ac_free_columns[0].reshape(16, 8, 8)[:, 1:, :] *= rng.integers(0, 2, (16, 1, 8))
    extremes = (
        np.array([np.zeros(64), np.full(64, hi), np.full(64, lo), np.where(np.arange(64) % 2, hi, lo)]),
        np.full((4, 64), cfg.max_quant),
    )

    legal = [flat, smooth, textured]
    hostile = [random_full, random_small, dc_huge, ac_free_columns, extremes]
    coef = np.concatenate([c for c, _ in legal + hostile]).astype(np.int16)
    quant = np.concatenate([np.broadcast_to(q, c.shape) for c, q in legal + hostile]).astype(np.uint16)
    if cfg.max_quant == 1:
        quant[:] = 1
    is_hostile = np.repeat([False] * len(legal) + [True] * len(hostile), [len(c) for c, _ in legal + hostile])
    return coef, quant, is_hostile


def reference_library() -> ctypes.CDLL:
    return ctypes.CDLL(os.environ["TB_IDCT_REF_LIB"])


def reference(coef: np.ndarray, quant: np.ndarray, entry: str) -> np.ndarray:
    """Samples (n, 64) from the C model entry point idct_ref_islow or idct_ref_blackbox."""
    coef = np.ascontiguousarray(coef, np.int16)
    quant = np.ascontiguousarray(quant, np.uint16)
    out = np.zeros(coef.shape, np.uint8)
    getattr(reference_library(), entry)(
        coef.ctypes.data_as(ctypes.c_void_p),
        quant.ctypes.data_as(ctypes.c_void_p),
        out.ctypes.data_as(ctypes.c_void_p),
        ctypes.c_int(len(coef)),
    )
    return out


def expected_samples(cfg: Config, coef: np.ndarray, quant: np.ndarray) -> np.ndarray:
    samples = reference(coef, quant, "idct_ref_islow")
    if cfg.dequant and cfg.coef_width == 16 and cfg.quant_width == 16:
        np.testing.assert_array_equal(reference(coef, quant, "idct_ref_blackbox"), samples)
    return samples


def model_has_same_datapath(cfg: Config) -> bool:
    """Whether the compiled idct_islow wraps where this build does (hostile blocks comparable)."""
    word_bits = reference_library().idct_ref_word_bits()
    return cfg.datapath_width == (word_bits if word_bits <= 32 else 0)


def pack_rows(cfg: Config, coef: np.ndarray, quant: np.ndarray) -> list[bytes]:
    """One s_axis beat per block row, lane k at bits [k*LANE_WIDTH +: LANE_WIDTH]."""
    c = coef.astype(np.int64).reshape(-1, 8)
    q = quant.astype(np.int64).reshape(-1, 8)
    if cfg.dequant:
        lanes = (c & ((1 << cfg.coef_width) - 1)) | (q << cfg.coef_width)
    else:
        lanes = (c * q) & ((1 << cfg.coef_width) - 1)
    nbytes = 8 * cfg.lane_width // 8
    beats = []
    for row in lanes.tolist():
        word = 0
        for k, lane in enumerate(row):
            word |= lane << (k * cfg.lane_width)
        beats.append(word.to_bytes(nbytes, "little"))
    return beats


async def reset(dut) -> None:
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


def attach_streams(dut) -> tuple[AxiStreamSource, AxiStreamSink]:
    source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
    # Their per-frame INFO lines would cost more simulation time than the design itself.
    source.log.setLevel(logging.WARNING)
    sink.log.setLevel(logging.WARNING)
    return source, sink


def start(dut) -> tuple[AxiStreamSource, AxiStreamSink]:
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    return attach_streams(dut)


async def stream_blocks(cfg: Config, source: AxiStreamSource, sink: AxiStreamSink, coef, quant) -> np.ndarray:
    for beat in pack_rows(cfg, coef, quant):
        await source.send(AxiStreamFrame(beat))
    rows = [bytes((await sink.recv()).tdata) for _ in range(8 * len(coef))]
    return np.frombuffer(b"".join(rows), np.uint8).reshape(-1, 64)


def assert_bit_exact(got: np.ndarray, want: np.ndarray) -> None:
    bad = np.argwhere(got != want)
    assert bad.size == 0, (
        f"{len(np.unique(bad[:, 0]))} of {len(want)} blocks differ; first block {bad[0, 0]}: "
        f"got {got[bad[0, 0]].tolist()} want {want[bad[0, 0]].tolist()}"
    )


@cocotb.test()
async def bit_exact_with_idle_and_backpressure(dut):
    """Every vector, with random gaps in s_axis_tvalid and random drops of m_axis_tready.
    Hostile blocks are compared only where the compiled idct_islow has this build's datapath."""
    cfg = Config()
    rng = np.random.default_rng(1000 + cfg.coef_width + 7 * cfg.quant_width + 3 * cfg.dequant)
    coef, quant, hostile = make_blocks(cfg, rng)
    want = expected_samples(cfg, coef, quant)
    source, sink = start(dut)
    source.set_pause_generator(random_pauses(rng, 0.3))
    sink.set_pause_generator(random_pauses(rng, 0.3))
    await reset(dut)
    got = await stream_blocks(cfg, source, sink, coef, quant)
    compared = ~hostile | model_has_same_datapath(cfg)
    assert_bit_exact(got[compared], want[compared])
    dut._log.info(
        "%d of %d blocks (%d hostile) bit-exact with idct_islow (%d-bit model)",
        compared.sum(), len(coef), (hostile & compared).sum(), reference_library().idct_ref_word_bits(),
    )


@cocotb.test()
async def full_rate_latency_and_interval(dut):
    """With no stalls the unit takes one beat per cycle each way: block b's last row leaves
    LATENCY_CYCLES + b * II_CYCLES cycles after the first row of block 0 entered."""
    cfg = Config()
    rng = np.random.default_rng(7)
    coef, quant, hostile = make_blocks(cfg, rng)
    coef, quant = coef[~hostile][-24:], quant[~hostile][-24:]
    want = expected_samples(cfg, coef, quant)
    source, sink = start(dut)
    await reset(dut)

    cycle, first_in, last_rows = 0, None, []

    async def monitor():
        nonlocal cycle, first_in
        while True:
            await RisingEdge(dut.clk)
            if first_in is None and dut.s_axis_tvalid.value == 1 and dut.s_axis_tready.value == 1:
                first_in = cycle
            if dut.m_axis_tvalid.value == 1 and dut.m_axis_tready.value == 1:
                last_rows.append(cycle)
            cycle += 1

    cocotb.start_soon(monitor())
    got = await stream_blocks(cfg, source, sink, coef, quant)
    assert_bit_exact(got, want)
    block_done = [c - first_in for c in last_rows[7::8]]
    assert block_done == [LATENCY_CYCLES + II_CYCLES * b for b in range(len(coef))], block_done


@cocotb.test()
async def reset_drops_a_partial_block(dut):
    """A synchronous reset in the middle of a block leaves no trace in the blocks that follow."""
    cfg = Config()
    rng = np.random.default_rng(11)
    coef, quant, hostile = make_blocks(cfg, rng)
    coef, quant = coef[~hostile][::8], quant[~hostile][::8]
    want = expected_samples(cfg, coef, quant)
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    await reset(dut)
    dut.m_axis_tready.value = 1
    for beat in pack_rows(cfg, coef, quant)[:11]:  # one block and three rows of the next
        dut.s_axis_tdata.value = int.from_bytes(beat, "little")
        dut.s_axis_tvalid.value = 1
        await RisingEdge(dut.clk)
    dut.s_axis_tvalid.value = 0
    await ClockCycles(dut.clk, 5)
    await reset(dut)
    assert dut.m_axis_tvalid.value == 0
    source, sink = attach_streams(dut)
    got = await stream_blocks(cfg, source, sink, coef, quant)
    assert_bit_exact(got, want)


# The parameter sets swept from pytest (every HDL parameter of the unit varies across them).
PARAMETER_SETS = {
    # The blackbox's default: same inputs as idct_islow (int16 coefficient, uint16 step per
    # lane), 32-bit datapath; and the same never overflowing.
    "dequant_c16_q16_w32": {"COEF_WIDTH": 16, "QUANT_WIDTH": 16, "DEQUANT": 1, "DATAPATH_WIDTH": 32},
    "dequant_c16_q16_exact": {"COEF_WIDTH": 16, "QUANT_WIDTH": 16, "DEQUANT": 1, "DATAPATH_WIDTH": 0},
    # Baseline JPEG: 12-bit coefficients, 8-bit quantisation tables.
    "dequant_c12_q8_w32": {"COEF_WIDTH": 12, "QUANT_WIDTH": 8, "DEQUANT": 1, "DATAPATH_WIDTH": 32},
    # Already dequantised coefficients, int16 and int32 (every int16 * uint16 product).
    "dequantised_c16_exact": {"COEF_WIDTH": 16, "QUANT_WIDTH": 16, "DEQUANT": 0, "DATAPATH_WIDTH": 0},
    "dequantised_c32_w32": {"COEF_WIDTH": 32, "QUANT_WIDTH": 16, "DEQUANT": 0, "DATAPATH_WIDTH": 32},
}


@pytest.mark.parametrize("parameters", list(PARAMETER_SETS.values()), ids=list(PARAMETER_SETS))
def test_idct8x8_islow(parameters, tmp_path):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    hls = REPO / "hls"
    lib = build_shared_library(
        [HERE / "idct_ref.cpp", hls / "image" / "idct8x8_islow.cpp"],
        [header for folder in ("common", "image") for header in (hls / folder).glob("*.h")],
        REPO / "build" / "sim_tb" / UNIT,
        "idct_ref",
    )
    run_testbench(UNIT, parameters, tmp_path / "sim", {"TB_IDCT_REF_LIB": str(lib)})
