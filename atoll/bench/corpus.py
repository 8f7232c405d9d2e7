"""Synthetic media for benchmarks and tests: photo-like JPEGs and tone-plus-noise PCM clips.

Nothing is downloaded: images are smooth colour gradients with sensor-like noise (they compress like
photographs, unlike white noise), encoded by OpenCV; clips are a tone plus noise.
"""

from __future__ import annotations

import numpy as np

# (width, height) from phone thumbnails to 12 MP camera frames
IMAGE_SIZES = ((500, 375), (640, 480), (1024, 768), (1600, 1200), (2048, 1536), (4000, 3000))
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


def tone(seconds: float, rate: int, freq: float = 440.0, dtype=np.int16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    y = 0.5 * np.sin(2 * np.pi * freq * t) + 0.05 * rng.standard_normal(t.size)
    if dtype == np.int16:
        return (y * 32767).astype(np.int16)
    return y.astype(np.float32)
