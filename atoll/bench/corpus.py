"""Synthetic media for benchmarks and tests: photo-like JPEGs, tone-plus-noise PCM clips and
speech-like WAV files.

Nothing is downloaded: images are smooth colour gradients with sensor-like noise (they compress like
photographs, unlike white noise), encoded by OpenCV; clips are a tone plus noise.
"""

from __future__ import annotations

import io

import cv2
import numpy as np
import soundfile
from fpga_host import jpeg_header

# (width, height) from phone thumbnails to 12 MP camera frames
IMAGE_SIZES = ((500, 375), (640, 480), (1024, 768), (1600, 1200), (2048, 1536), (4000, 3000))
# JPEG size sets of `atoll bench serve`: web pictures of 0.1-0.5 MP, camera frames up to 12 MP
JPEG_SETS = {
    "web": ((400, 300), (500, 375), (375, 500), (640, 480), (800, 600)),
    "camera": ((1024, 768), (1600, 1200), (2048, 1536), (3264, 2448), (4000, 3000)),
}
CLIP_SECONDS = (2.5, 5.0, 15.0, 25.0)


# Chroma subsampling of jpeg_bytes -> OpenCV's setting (4:2:0 is OpenCV's default)
SAMPLING = {"420": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420, "444": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444}


def jpeg_bytes(width: int, height: int, seed: int = 0, progressive: bool = False,
               quality: int = 90, noise: float = 12.0, sampling: str = "420") -> bytes:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi, 3).astype(np.float32)
    base = np.stack([xx / max(width, 1), yy / max(height, 1), (xx + yy) / (width + height)], -1) * 200
    base += 25 * np.sin(xx[..., None] / 37 + yy[..., None] / 53 + phase)
    img = np.clip(base + rng.normal(0, noise, base.shape).astype(np.float32), 0, 255).astype(np.uint8)
    params = [cv2.IMWRITE_JPEG_QUALITY, quality, cv2.IMWRITE_JPEG_PROGRESSIVE, int(progressive),
              cv2.IMWRITE_JPEG_SAMPLING_FACTOR, SAMPLING[sampling]]
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


def jpeg_scan_bomb(side: int = 8192, scans: int = 1000) -> bytes:
    """A small progressive JPEG (~100 bytes a scan) that claims `side` x `side` and holds `scans`
    AC refinement scans of its luma, each one end-of-band run over every block: two bytes stand
    for 32767 blocks, yet the decoder visits all 63 coefficients of each (docs/robustness.md).
    Padded with comment segments to one byte per eight blocks, the least a whole file holds, so it
    is within every size limit: only the number of scans says what it costs."""
    base = jpeg_bytes(16, 16, quality=50, progressive=True)
    sof = base.index(b"\xff\xc2")
    head = bytearray(base[:base.index(b"\xff\xda")])  # markers up to the first scan
    head[sof + 5:sof + 9] = side.to_bytes(2, "big") + side.to_bytes(2, "big")
    # AC table 1: one code, "0", for symbol 0xE0 (an end-of-band run of 2^14 + the next 14 bits)
    table = bytes([0x11, 1] + [0] * 15 + [0xE0])
    dht = b"\xff\xc4" + (2 + len(table)).to_bytes(2, "big") + table
    bits = ("0" + "1" * 14) * -(-(side // 8) ** 2 // 32767)  # runs of 32767 blocks until all are covered
    bits += "1" * (-len(bits) % 8)  # padded with 1s, as the standard pads
    entropy = int(bits, 2).to_bytes(len(bits) // 8, "big").replace(b"\xff", b"\xff\x00")  # byte stuffing
    # one component (1), DC table 0 / AC table 1, spectral band 1..63, successive approximation 1 -> 0
    header = bytes([1, 1, 0x01, 1, 63, 0x10])
    scan = b"\xff\xda" + (2 + len(header)).to_bytes(2, "big") + header + entropy
    body = bytes(head) + dht + scan * scans + b"\xff\xd9"
    padding, comments = max(0, jpeg_header.frame(body).blocks() // 8 + 1 - len(body)), b""
    while padding > 0:
        n = min(padding, 65533)
        comments += b"\xff\xfe" + (n + 2).to_bytes(2, "big") + b"\x00" * n
        padding -= n + 4
    return body[:2] + comments + body[2:]


def tone(seconds: float, rate: int, freq: float = 440.0, dtype=np.int16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    y = 0.5 * np.sin(2 * np.pi * freq * t) + 0.05 * rng.standard_normal(t.size)
    if dtype == np.int16:
        return (y * 32767).astype(np.int16)
    return y.astype(np.float32)


def synthetic_wav(rng: np.random.Generator, seconds: float, rate: int = 16000) -> bytes:
    """Speech-like audio: a gliding harmonic source with formant-like weights, syllable envelope."""

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
