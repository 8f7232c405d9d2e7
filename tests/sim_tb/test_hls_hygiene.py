"""The line-rate checker (`sim_tb.hls_hygiene`, libclang): on the DPU kernels as they stood before
issue 31 (tests/sim_tb/fixtures/hls_before) it reports every place the issue lists; on today's
kernels, nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim_tb.hls_hygiene import check

REPO = Path(__file__).resolve().parents[2]
BEFORE = Path(__file__).resolve().parent / "fixtures" / "hls_before"
TOPS = {"image_cu": "image/image_cu.cpp", "audio_mel_cu": "audio/audio_mel_cu.cpp",
        "audio_norm_cu": "audio/audio_norm_cu.cpp"}

# (file, line, rule) for each place issue 31 names, at its line in the fixture.
LISTED = {
    ("image/image_writer.h", 33, "port-beats"),      # 3-12 single-byte writes per pixel, II=1 claimed
    ("image/image_writer.h", 33, "narrow-port"),     # ... through an 8-bit port: no wide bursts
    ("image/jpeg_huffman.h", 62, "narrow-port"),     # entropy decoder reads the JPEG a byte at a time
    ("image/jpeg_huffman.h", 99, "port-in-struct"),  # the m_axi pointer kept in the bit reader
    ("image/jpeg_markers.h", 224, "port-arith"),     # jpeg + pos handed to the segment parsers
    ("image/jpeg_decode.h", 102, "port-arith"),      # scratch + offset handed to transform_block
    ("image/jpeg_upsample.h", 28, "port-beats"),     # 3 reads per iteration on one bundle
    ("image/jpeg_upsample.h", 70, "port-beats"),     # two rows interleaved on one bundle
    ("audio/resampler.h", 204, "float-carried"),     # acc[l] += ... at II=1
    ("audio/resampler.h", 197, "runtime-window"),    # &ring[start] into a cyclic-32 partition
    ("audio/resampler.h", 190, "partition-param"),   # partition pragmas on sub-function parameters
    ("audio/resampler.h", 124, "array-ports"),       # four reads of PROTO_TABLE per cycle
    ("audio/resampler.h", 142, "divide"),            # a 64-bit divide in the pipelined loop
    ("audio/normaliser.h", 50, "float-carried"),     # r[l] += ... at II=1
    ("audio/pcm_reader.h", 15, "port-beats"),        # 2-4 single-byte reads per sample
    ("audio/pcm_reader.h", 33, "port-beats"),
    ("audio/log_mel.h", 22, "narrow-port"),          # strided 32-bit writes, no bursts
}


@pytest.fixture(scope="module")
def before():
    # The fixture keeps the files the work changed; the rest come from hls/ unchanged.
    fallback = tuple(REPO / "hls" / d for d in ("image", "audio", "common"))
    found = check(BEFORE, {k: BEFORE / v for k, v in TOPS.items()}, include=fallback)
    return {(str(Path(f.file).relative_to("hls_before")), f.line, f.rule) for f in found}


def test_every_listed_place_is_reported_on_the_old_kernels(before):
    assert LISTED <= before, sorted(LISTED - before)


def test_every_rule_fires_on_the_old_kernels(before):
    assert {rule for _, _, rule in before} >= {"port-beats", "narrow-port", "port-in-struct", "port-arith",
                                               "float-carried", "runtime-window", "partition-param",
                                               "array-ports", "divide"}


def test_nothing_on_todays_kernels():
    """Every kernel top the HLS-component configs name, followed through all it calls."""
    assert [str(f) for f in check(REPO / "hls")] == []
