"""Test media made with OpenCV/NumPy: JPEG bytes of given sizes and PCM tones."""

from __future__ import annotations

import cv2
import numpy as np


def jpeg_bytes(width: int, height: int, seed: int = 0, progressive: bool = False,
               quality: int = 90) -> bytes:
    rng = np.random.default_rng(seed)
    # Smooth gradients plus noise: compresses like a photograph, not like white noise.
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([xx / max(width, 1), yy / max(height, 1), (xx + yy) / (width + height)], -1) * 200
    img = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
    params = [cv2.IMWRITE_JPEG_QUALITY, quality, cv2.IMWRITE_JPEG_PROGRESSIVE, int(progressive)]
    ok, buf = cv2.imencode(".jpg", img, params)
    assert ok
    return buf.tobytes()


def tone(seconds: float, rate: int, freq: float = 440.0, dtype=np.int16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    y = 0.5 * np.sin(2 * np.pi * freq * t) + 0.05 * rng.standard_normal(t.size)
    if dtype == np.int16:
        return (y * 32767).astype(np.int16)
    return y.astype(np.float32)
