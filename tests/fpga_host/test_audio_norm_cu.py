"""audio_norm_cu chained after audio_mel_cu (hls/audio, C simulation) against the librosa/NumPy
reference of ARCHITECTURE.md 4.2: (L - mean) / (std(ddof=1) + 1e-5) per mel band.

Bound (issue 4): mean absolute error <= 0.01 and 99.9th percentile <= 0.05 on the normalised output.
It is asserted on every frame and band, with these documented exceptions, each a place where the
reference is not a property of the signal:
- 11025, 22050, 37800, 44099 and 44100 Hz (soxr's interpolated-polyphase path): soxr's first
  output sample is a few per cent off the band-limited value the CU computes; it sits in the
  windows of frames 0 and 1, which are only checked to be finite and within FRAME01_MAX. For
  steady pure tones at these rates the per-band std is tiny (~0.01), so soxr's ~1e-4 coefficient
  interpolation error is magnified; those cases get p99.9 <= TONES_P999. For scale: swapping
  librosa's resampler from soxr_hq to soxr_vhq moves the reference itself by p99.9 0.03-0.12 there;
- bands whose reference log-mel is constant to within 1e-3 (above 4 kHz in a silent 8 kHz clip
  with one click): the normalised value there is float32 rounding noise divided by std + 1e-5.
  Their log-mel is checked in test_audio_mel_cu.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.fpga_host import audio_csim
from tests.fpga_host.audio_signals import (LONG_CASES, OTHER_RATE_CASES, SHORT_CASES, SOXR_INTERPOLATED_RATES,
                                           case, librosa_log_mel, librosa_normalised)

OK, BAD_ARGS, EMPTY = 0, 4, 5
NORM_MAE = 0.01
NORM_P999 = 0.05
TONES_P999 = 0.1
FRAME01_MAX = 4.0
FLAT_BAND_STD = 1e-3


@pytest.fixture(scope="module", autouse=True)
def warm_librosa():
    librosa_log_mel(np.zeros(8000, np.float32), 8000)
    audio_csim.mel_cu(np.zeros(16, np.float32), 16000)


def normalised(pcm: np.ndarray, rate: int) -> np.ndarray:
    words, mel, stats = audio_csim.mel_cu(pcm, rate)
    assert words[0] == OK
    words, out = audio_csim.norm_cu(mel, stats)
    assert list(words[:3]) == [OK, 80, mel.shape[1]]
    return out


def check_normalised(kind, seconds, rate, dtype):
    pcm, log_mel = case(kind, seconds, rate, dtype)
    reference = librosa_normalised(log_mel)
    out = normalised(pcm, rate)
    err = np.abs(out.astype(np.float64) - reference)
    assert np.isfinite(out).all()
    bands = log_mel.std(axis=1, ddof=1) >= FLAT_BAND_STD
    first = 2 if rate in SOXR_INTERPOLATED_RATES else 0
    assert err[:, :first].max(initial=0.0) <= FRAME01_MAX
    err = err[bands, first:]
    p999 = TONES_P999 if kind == "tones" and rate in SOXR_INTERPOLATED_RATES else NORM_P999
    assert err.mean() <= NORM_MAE, err.mean()
    assert np.quantile(err, 0.999) <= p999, np.quantile(err, 0.999)


@pytest.mark.parametrize("kind,seconds,rate,dtype", SHORT_CASES)
def test_normalised_matches_librosa(kind, seconds, rate, dtype):
    check_normalised(kind, seconds, rate, dtype)


@pytest.mark.parametrize("kind,seconds,rate,dtype", OTHER_RATE_CASES)
def test_normalised_matches_librosa_other_rates(kind, seconds, rate, dtype):
    check_normalised(kind, seconds, rate, dtype)


@pytest.mark.parametrize("kind,seconds,rate,dtype", LONG_CASES)
def test_normalised_matches_librosa_long(kind, seconds, rate, dtype):
    check_normalised(kind, seconds, rate, dtype)


def test_long_clips_meet_the_bound_without_exclusions():
    """Over 30 s, frame 0 is too small a share to matter: the bound holds on the whole output."""
    pcm, log_mel = case("speech", 30.0, 44100, "int16")
    err = np.abs(normalised(pcm, 44100) - librosa_normalised(log_mel))
    assert err.mean() <= NORM_MAE and np.quantile(err, 0.999) <= NORM_P999


def test_single_frame_is_empty_not_nan():
    """T = 1: numpy's ddof=1 std is NaN; the CU reports EMPTY and writes zeros."""
    words, mel, stats = audio_csim.mel_cu(np.ones(100, np.int16), 16000)
    assert words[2] == 1
    words, out = audio_csim.norm_cu(mel, stats)
    assert words[0] == EMPTY and list(words[1:3]) == [80, 1]
    assert np.array_equal(out, np.zeros((80, 1), np.float32))


def test_two_frames():
    pcm = (np.sin(np.arange(200) * 0.3) * 8000).astype(np.int16)
    words, mel, stats = audio_csim.mel_cu(pcm, 16000)
    out = audio_csim.norm_cu(mel, stats)[1]
    np.testing.assert_allclose(out, librosa_normalised(mel), atol=1e-4)


def test_constant_band_gives_zeros():
    """Digital silence: every band is log(2^-24) in every frame, std 0, output exactly 0."""
    words, mel, stats = audio_csim.mel_cu(np.zeros(8000, np.int16), 16000)
    assert np.all(mel == np.float32(np.log(np.float32(2**-24))))
    assert np.array_equal(audio_csim.norm_cu(mel, stats)[1], np.zeros_like(mel))


def test_too_many_frames():
    mel = np.zeros((80, 2), np.float32)
    words, _ = audio_csim.norm_cu(mel, np.zeros(160), n_frames=3002)
    assert words[0] == BAD_ARGS
