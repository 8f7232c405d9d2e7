"""What every request's media goes through around the model, in Atoll's front ends and in the
baseline servers of `atoll bench serve` alike: reading audio files, and stacking a request's rows
back into one output (or input) tensor."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import soundfile
from fpga_host.cpu_backend import validate_length

MAX_CHANNELS = 8  # FLAC's most; more would only multiply what a lying header makes us allocate
# Float files can hold any finite value; past ~1e16 the mel power overflows float32 (librosa then
# refused the clip mid-pipeline: a 500). Full scale is 1: this leaves any real recording's headroom.
MAX_AMPLITUDE = 1e6


class MediaError(ValueError):
    """Unreadable or unsupported media in a request (answered with HTTP 400)."""


@dataclass(frozen=True)
class AudioHeader:
    frames: int
    rate: int
    channels: int

    @classmethod
    def of(cls, f) -> AudioHeader:
        """What an open `soundfile.SoundFile`'s header states."""
        return cls(f.frames, f.samplerate, f.channels)

    @property
    def seconds(self) -> float:
        return self.frames / self.rate


def _open(data: bytes):
    """An audio file open for reading; MediaError (with libsndfile's reason, never the repr of the
    buffer it was read from) when it cannot be. Only WAV and FLAC reach libsndfile, told apart by
    their first bytes: it would parse a dozen more containers (AIFF, CAF, VOC, IRCAM, MAT5...),
    whose parsers are where its history of memory-safety bugs lies, and a crash there would take a
    front end down with every request it holds."""

    if not (data[:4] in (b"RIFF", b"RF64") and data[8:12] == b"WAVE" or data[:4] == b"fLaC"):
        raise MediaError("not a WAV or FLAC file")
    try:
        return soundfile.SoundFile(io.BytesIO(data))
    except soundfile.LibsndfileError as exc:
        raise MediaError(f"not a readable audio file: {exc.error_string}") from None
    except (RuntimeError, TypeError, ValueError) as exc:  # what else soundfile raises on odd headers
        raise MediaError(f"not a readable audio file ({type(exc).__name__})") from None


def audio_header(data: bytes) -> AudioHeader:
    """Frames, rate and channels as the WAV/FLAC header states them, nothing decoded."""
    with _open(data) as f:
        return AudioHeader.of(f)


def read_wav(data: bytes, max_seconds: float = 30.0) -> tuple[np.ndarray, int]:
    """WAV/FLAC bytes -> (mono float32 PCM, sample rate); stereo is averaged to mono. The header
    is checked before any sample is decoded: the decoder allocates what it claims (`max_seconds`
    defaults to `cpu_backend.audio`'s)."""

    with _open(data) as f:
        header = AudioHeader.of(f)
        validate_length(header.frames, header.rate, max_seconds)
        if header.channels > MAX_CHANNELS:
            raise MediaError(f"{header.channels} channels; at most {MAX_CHANNELS} are accepted")
        try:
            pcm = f.read(dtype="float32", always_2d=True)
        except soundfile.LibsndfileError as exc:
            raise MediaError(f"unreadable audio data: {exc.error_string}") from None
    mono = pcm.mean(axis=1, dtype=np.float32)
    peak = float(np.abs(mono).max(initial=0.0))
    if np.isfinite(peak) and peak > MAX_AMPLITUDE:  # (non-finite samples have their own refusal, every backend's)
        raise MediaError(f"samples reach {peak:.3g}; audio is taken up to {MAX_AMPLITUDE:g} (full scale is 1)")
    return mono, header.rate


def pad_stack(arrays: list[np.ndarray]) -> np.ndarray:
    """Stack rows along a new batch axis, zero-padding each axis to the longest row's (the audio
    features or outputs of a request with clips of several lengths). Always a copy."""
    if len(arrays) == 1:  # most requests: np.stack's checks cost more than the copy
        return arrays[0][np.newaxis].copy()
    if all(a.shape == arrays[0].shape for a in arrays):
        return np.stack(arrays)
    out = np.zeros((len(arrays), *np.max([a.shape for a in arrays], axis=0)), dtype=arrays[0].dtype)
    for i, a in enumerate(arrays):
        out[(i, *(slice(0, n) for n in a.shape))] = a
    return out
