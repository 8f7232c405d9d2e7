"""Synthetic media for benchmarks and tests: photo-like JPEGs, tone-plus-noise PCM clips and
speech-like WAV files.

Nothing is downloaded: images are smooth colour gradients with sensor-like noise (they compress like
photographs, unlike white noise), encoded by OpenCV; clips are a tone plus noise.
"""

from __future__ import annotations

import io

import numpy as np

# (width, height) from phone thumbnails to 12 MP camera frames
IMAGE_SIZES = ((500, 375), (640, 480), (1024, 768), (1600, 1200), (2048, 1536), (4000, 3000))
# JPEG size sets of `atoll bench serve`: web pictures of 0.1-0.5 MP, camera frames up to 12 MP
JPEG_SETS = {
    "web": ((400, 300), (500, 375), (375, 500), (640, 480), (800, 600)),
    "camera": ((1024, 768), (1600, 1200), (2048, 1536), (3264, 2448), (4000, 3000)),
}
CLIP_SECONDS = (2.5, 5.0, 15.0, 25.0)


def jpeg_bytes(width: int, height: int, seed: int = 0, progressive: bool = False,
               quality: int = 90, noise: float = 12.0) -> bytes:
    import cv2

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi, 3).astype(np.float32)
    base = np.stack([xx / max(width, 1), yy / max(height, 1), (xx + yy) / (width + height)], -1) * 200
    base += 25 * np.sin(xx[..., None] / 37 + yy[..., None] / 53 + phase)
    img = np.clip(base + rng.normal(0, noise, base.shape).astype(np.float32), 0, 255).astype(np.uint8)
    params = [cv2.IMWRITE_JPEG_QUALITY, quality, cv2.IMWRITE_JPEG_PROGRESSIVE, int(progressive)]
    ok, buf = cv2.imencode(".jpg", img, params)
    if not ok:
        raise RuntimeError("OpenCV failed to encode a JPEG")
    return buf.tobytes()


def jpeg_bomb(width: int = 30000, height: int = 30000) -> bytes:
    """A tiny (< 1 KB) valid JPEG whose frame header claims `width` x `height`: what a decoder
    would allocate for before it finds the data missing."""
    data = bytearray(jpeg_bytes(16, 16, quality=50))
    sof = data.index(b"\xff\xc0")  # baseline frame header: marker, length, precision, height, width
    data[sof + 5:sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(data)


def tone(seconds: float, rate: int, freq: float = 440.0, dtype=np.int16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    y = 0.5 * np.sin(2 * np.pi * freq * t) + 0.05 * rng.standard_normal(t.size)
    if dtype == np.int16:
        return (y * 32767).astype(np.int16)
    return y.astype(np.float32)


def synthetic_wav(rng: np.random.Generator, seconds: float, rate: int = 16000) -> bytes:
    """Speech-like audio: a gliding harmonic source with formant-like weights, syllable envelope."""
    import soundfile

    t = np.arange(int(seconds * rate)) / rate
    f0 = 110 + 30 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6))
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voice = sum(np.sin(k * phase) / k * np.exp(-((k * 120 - 700) / 900) ** 2) for k in range(1, 30))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t + rng.uniform(0, 6)) ** 2
    pcm = 0.3 * voice * envelope + 0.01 * rng.normal(size=t.size)
    buf = io.BytesIO()
    soundfile.write(buf, (pcm / np.abs(pcm).max() * 0.8).astype(np.float32), rate, format="WAV",
                    subtype="PCM_16")  # fmt: skip
    return buf.getvalue()
