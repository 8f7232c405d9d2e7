"""What every request's media goes through around the model, in Atoll's front ends and in the
baseline servers of `atoll bench serve` alike: reading audio files, and stacking a request's rows
back into one output (or input) tensor."""

from __future__ import annotations

import io

import numpy as np


class MediaError(ValueError):
    """Unreadable or unsupported media in a request (answered with HTTP 400)."""


def read_wav(data: bytes) -> tuple[np.ndarray, int]:
    """WAV/FLAC bytes -> (mono float32 PCM, sample rate); stereo is averaged to mono."""
    import soundfile

    try:
        pcm, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as exc:  # soundfile raises several types for bad files
        raise MediaError(f"not a readable audio file: {exc}") from None
    return pcm.mean(axis=1, dtype=np.float32), int(rate)


def pad_stack(arrays: list[np.ndarray]) -> np.ndarray:
    """Stack rows along a new batch axis, zero-padding each axis to the longest row's (the audio
    features or outputs of a request with clips of several lengths)."""
    if all(a.shape == arrays[0].shape for a in arrays):
        return np.stack(arrays)
    out = np.zeros((len(arrays), *np.max([a.shape for a in arrays], axis=0)), dtype=arrays[0].dtype)
    for i, a in enumerate(arrays):
        out[(i, *(slice(0, n) for n in a.shape))] = a
    return out
