"""Test audio for the audio CUs: speech-like and synthetic signals, made with NumPy/SciPy, and the
librosa reference pipeline of ARCHITECTURE.md section 4.2."""

from __future__ import annotations

import functools

import numpy as np
import scipy.signal

OUT_RATE = 16000
MEL_PARAMS = dict(sr=OUT_RATE, n_fft=512, hop_length=160, win_length=400, window="hann", center=True,
                  pad_mode="constant", power=2.0, n_mels=80, fmin=0, fmax=8000, htk=False, norm="slaney")


def librosa_log_mel(y: np.ndarray, sample_rate: int) -> np.ndarray:
    """The reference, verbatim from ARCHITECTURE.md 4.2, up to the log: (80, T) float32."""
    import librosa  # heavy: librosa loads numba, paid only where audio is used

    if sample_rate != OUT_RATE:
        y = librosa.resample(y, orig_sr=sample_rate, target_sr=OUT_RATE)
    y = librosa.effects.preemphasis(y, coef=0.97)
    return np.log(librosa.feature.melspectrogram(y=y, **MEL_PARAMS) + 2**-24)


def librosa_normalised(log_mel: np.ndarray) -> np.ndarray:
    mean = log_mel.mean(axis=1, keepdims=True)
    std = log_mel.std(axis=1, ddof=1, keepdims=True)
    return (log_mel - mean) / (std + 1e-5)


def speech_like(seconds: float, rate: int, seed: int = 0) -> np.ndarray:
    """Glottal-like harmonic source (wandering f0) through three formant resonators that move every
    80 ms, syllable-rate amplitude modulation, short pauses, and a little breath noise."""
    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    t = np.arange(n) / rate
    f0 = 110 + 40 * rng.random() + 25 * np.sin(2 * np.pi * 0.6 * t + rng.random() * 6)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    harmonics = np.arange(1, 31)[:, None]
    source = (np.cos(harmonics * phase[None, :]) / harmonics).sum(axis=0)
    voiced = np.zeros(n)
    seg = max(1, int(0.08 * rate))
    for start in range(0, n, seg):
        chunk = source[start:start + seg]
        for centre, q in ((rng.uniform(300, 900), 6), (rng.uniform(900, 2400), 9), (rng.uniform(2400, 3600), 12)):
            b, a = scipy.signal.iirpeak(min(centre, 0.45 * rate), q, fs=rate)
            voiced[start:start + seg] += scipy.signal.lfilter(b, a, chunk)
    syllables = np.clip(np.sin(2 * np.pi * 4.0 * t + rng.random() * 6), 0, None) ** 0.7
    y = voiced * syllables + 0.01 * rng.standard_normal(n) * np.std(voiced)
    return 0.4 * y / (np.max(np.abs(y)) + 1e-12)


def chirp(seconds: float, rate: int, seed: int = 0) -> np.ndarray:
    n = int(seconds * rate)
    t = np.arange(n) / rate
    return 0.5 * scipy.signal.chirp(t, f0=50, t1=max(seconds, 1e-3), f1=0.48 * rate, method="logarithmic")


def tones(seconds: float, rate: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    t = np.arange(n) / rate
    freqs = rng.uniform(80, 0.45 * rate, 4)
    return sum(0.15 * np.sin(2 * np.pi * f * t + rng.random() * 6) for f in freqs)


def white_noise(seconds: float, rate: int, seed: int = 0) -> np.ndarray:
    return 0.2 * np.random.default_rng(seed).standard_normal(int(seconds * rate))


def silence_click(seconds: float, rate: int, seed: int = 0) -> np.ndarray:
    y = np.zeros(int(seconds * rate))
    y[len(y) // 3] = 0.9
    return y


SIGNALS = {"speech": speech_like, "chirp": chirp, "tones": tones, "noise": white_noise, "click": silence_click}


def pcm(kind: str, seconds: float, rate: int, dtype, seed: int = 0) -> np.ndarray:
    """Mono PCM of one signal class, int16 (full scale 32768) or float32."""
    y = SIGNALS[kind](seconds, rate, seed)
    if np.dtype(dtype) == np.int16:
        return np.clip(np.round(y * 32768), -32768, 32767).astype(np.int16)
    return y.astype(np.float32)


def as_float(samples: np.ndarray) -> np.ndarray:
    """What the reference sees: int16 scaled by 1/32768, float32 as is."""
    if samples.dtype == np.int16:
        return samples.astype(np.float32) / np.float32(32768)
    return samples


@functools.cache
def case(kind: str, seconds: float, rate: int, dtype_name: str) -> tuple[np.ndarray, np.ndarray]:
    """(PCM, librosa log-mel) for one test case, computed once per test session."""
    samples = pcm(kind, seconds, rate, np.dtype(dtype_name))
    return samples, librosa_log_mel(as_float(samples), rate)


RATES = (8000, 16000, 22050, 44100, 48000)
# Rates at which the CU only approximates soxr: soxr interpolates coefficients of its own there
# (~1e-4 of full scale from the CU's Kaiser prototype) and its first two outputs come from a
# start-up transient. At 22.05 and 44.1 kHz the CU carries soxr's measured response
# (hls/audio/soxr_tables.h); at 8, 12, 16, 24, 32 and 48 kHz soxr runs one exact filter that the
# CU's prototype reproduces. Both agree with soxr to ~2e-7.
SOXR_APPROXIMATED_RATES = (11025, 37800, 44099)
OTHER_RATE_CASES = [(kind, 1.3, rate, "float32") for rate in (11025, 12000, 24000, 32000, 37800, 44099)
                    for kind in ("speech", "chirp", "tones")]
_LENGTHS = (0.5, 1.3, 2.7, 4.1, 7.9)
# Every signal class at every rate at two lengths of 0.5..7.9 s, int16 and float32; plus a
# handful of long clips up to the 30 s maximum.
SHORT_CASES = [(kind, _LENGTHS[(i + j + k) % len(_LENGTHS)], rate, ("int16", "float32")[(i + j + k) % 2])
               for k in (0, 3) for i, kind in enumerate(SIGNALS) for j, rate in enumerate(RATES)]
LONG_CASES = [("speech", 30.0, 44100, "int16"), ("chirp", 30.0, 48000, "float32"),
              ("noise", 30.0, 8000, "int16"), ("tones", 12.0, 22050, "float32")]
