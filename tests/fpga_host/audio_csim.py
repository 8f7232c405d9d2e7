"""ctypes calls of the audio CUs in the C-simulation library (fpga_host.csim), for the tests."""

from __future__ import annotations

import ctypes

import numpy as np

from fpga_host import csim

N_MELS = 80
HOP = 160
STATUS_NAMES = csim.STATUS_NAMES


def _library() -> ctypes.CDLL:
    lib = csim.load_library()
    u32, ptr = ctypes.c_uint32, ctypes.c_void_p
    lib.audio_mel_cu.argtypes = [ptr, u32, u32, u32, u32, ptr, u32, ptr]
    lib.audio_mel_cu.restype = None
    lib.audio_norm_cu.argtypes = [ptr, u32, ptr, ptr]
    lib.audio_norm_cu.restype = None
    return lib


def beat_padded(data: np.ndarray) -> np.ndarray:
    """Bytes in a buffer of whole 64-byte beats, as the CUs' 512-bit ports read them."""
    padded = np.zeros(csim.whole_beats(data.size), np.uint8)
    padded[: data.size] = data.reshape(-1)
    return padded


def frames_for(n16: int) -> int:
    return 1 + n16 // HOP


def mel_cu(pcm: np.ndarray, sample_rate: int, max_samples: int = 0, capacity: int | None = None,
           sample_format: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Runs audio_mel_cu on int16 or float32 mono PCM: (status words, (80, T) log-mel); the log-mel
    is None unless the status code is OK. `capacity` defaults to 30 s at 16 kHz."""
    lib = _library()
    pcm = np.ascontiguousarray(pcm)
    fmt = (0 if pcm.dtype == np.int16 else 1) if sample_format is None else sample_format
    data = beat_padded(pcm.view(np.uint8))
    if capacity is None:
        capacity = N_MELS * frames_for(30 * 16000)
    mel = np.empty(max(capacity, 1), np.float32)  # the CU writes no further than `capacity` allows
    words = np.zeros(8, np.uint32)
    lib.audio_mel_cu(data.ctypes.data, pcm.size, fmt, sample_rate, max_samples, mel.ctypes.data, capacity,
                     words.ctypes.data)
    if words[0] != 0:
        return words, None
    t = int(words[2])
    return words, mel[: N_MELS * t].reshape(N_MELS, t).copy()


def norm_cu(mel: np.ndarray, n_frames: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Runs audio_norm_cu: (status words, (80, T) normalised)."""
    lib = _library()
    t = mel.shape[1] if n_frames is None else n_frames
    mel = beat_padded(np.ascontiguousarray(mel, np.float32).view(np.uint8))
    out = np.full(csim.whole_beats(4 * N_MELS * t) // 4, np.nan, np.float32)
    words = np.zeros(8, np.uint32)
    lib.audio_norm_cu(mel.ctypes.data, t, out.ctypes.data, words.ctypes.data)
    return words, out[: N_MELS * t].reshape(N_MELS, t)
