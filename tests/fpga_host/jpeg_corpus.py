"""Synthetic JPEG corpus for the image-CU tests, generated on the fly (no downloads).

Content looks like a photo as far as a codec can tell: smooth gradients, low-frequency shading,
sensor-like noise and hard-edged shapes, so every DCT frequency and every Huffman code length
gets exercised. Files are written by OpenCV (libjpeg-turbo) and Pillow with their own options.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Callable

import cv2
import numpy as np
from PIL import Image

CV2_SAMPLING = {
    "444": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444,
    "422": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422,
    "420": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420,
    "440": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_440,
    "411": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_411,
}


def natural_image(h: int, w: int, seed: int = 0) -> np.ndarray:
    """An RGB uint8 test picture of h x w."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi, 3)
    img = np.stack([
        128 + 90 * np.sin(x / (17 + w / 9) + y / (29 + h / 7) + phase[0]),
        120 + 80 * np.cos(x / (23 + w / 5) - y / (13 + h / 11) + phase[1]),
        (x * 200 / max(w, 1) + y * 55 / max(h, 1) + 40 * phase[2]) % 256,
    ], axis=-1)
    img += rng.normal(0, 6, img.shape).astype(np.float32)
    for _ in range(4):  # hard-edged rectangles of flat colour
        y0, x0 = rng.integers(0, max(h, 1)), rng.integers(0, max(w, 1))
        img[y0:y0 + h // 4 + 1, x0:x0 + w // 5 + 1] = rng.uniform(0, 255, 3)
    disk = (y - h * 0.6) ** 2 + (x - w * 0.3) ** 2 < (min(h, w) * 0.2) ** 2
    img[disk] = [240, 230, 20]
    img[:, ::max(w // 7, 2)] = 10  # thin dark lines
    return np.clip(img, 0, 255).astype(np.uint8)


def encode_cv2(rgb: np.ndarray, quality: int = 90, sampling: str = "420", restart: int = 0,
               gray: bool = False, optimize: bool = False) -> bytes:
    """JPEG written by OpenCV (libjpeg-turbo)."""
    img = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY) if gray else cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    params = [cv2.IMWRITE_JPEG_QUALITY, quality, cv2.IMWRITE_JPEG_RST_INTERVAL, restart,
              cv2.IMWRITE_JPEG_OPTIMIZE, int(optimize)]
    if not gray:
        params += [cv2.IMWRITE_JPEG_SAMPLING_FACTOR, CV2_SAMPLING[sampling]]
    ok, data = cv2.imencode(".jpg", img, params)
    assert ok
    return data.tobytes()


def encode_pillow(rgb: np.ndarray, quality: int = 90, subsampling: int = 2, gray: bool = False,
                  progressive: bool = False, mode: str = "RGB") -> bytes:
    """JPEG written by Pillow; subsampling 0/1/2 = 4:4:4 / 4:2:2 / 4:2:0."""
    img = Image.fromarray(rgb)
    img = img.convert("L") if gray else img.convert(mode)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality, subsampling=subsampling,
             progressive=progressive)
    return buf.getvalue()


def cv2_decode_rgb(data: bytes) -> np.ndarray:
    """The reference decode: cv2.imdecode (libjpeg-turbo, islow IDCT, fancy upsampling) in RGB.
    EXIF orientation is ignored, as the CU ignores it."""
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8),
                       cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


@dataclass(frozen=True)
class Case:
    kind: str  # accuracy is reported per kind
    name: str
    make: Callable[[], bytes]


def _sizes() -> list[tuple[int, int]]:
    return [(375, 500), (333, 257), (101, 77), (64, 48), (17, 9), (9, 17), (3, 2), (1, 1),
            (240, 321), (15, 16), (33, 31)]


def decode_corpus() -> list[Case]:
    """The files the decode test compares with cv2.imdecode."""
    cases: list[Case] = []
    for i, (h, w) in enumerate(_sizes()):
        for j, sampling in enumerate(("444", "422", "420", "440")):
            q = (50, 75, 90, 100)[(i + j) % 4]
            cases.append(Case(f"cv2-{sampling}", f"cv2-{sampling}-q{q}-{h}x{w}",
                              lambda h=h, w=w, q=q, s=sampling, seed=i: encode_cv2(
                                  natural_image(h, w, seed), q, s)))
        cases.append(Case("cv2-gray", f"cv2-gray-{h}x{w}",
                          lambda h=h, w=w, seed=i: encode_cv2(natural_image(h, w, seed), 85,
                                                              gray=True)))
        for sub in (0, 1, 2):
            q = (60, 80, 95)[(i + sub) % 3]
            cases.append(Case(f"pillow-sub{sub}", f"pillow-sub{sub}-q{q}-{h}x{w}",
                              lambda h=h, w=w, q=q, sub=sub, seed=i: encode_pillow(
                                  natural_image(h, w, seed), q, sub)))
    for restart, sampling in ((1, "420"), (3, "422"), (17, "420"), (2, "440"), (5, "444")):
        cases.append(Case("cv2-restart", f"cv2-{sampling}-rst{restart}",
                          lambda r=restart, s=sampling: encode_cv2(natural_image(203, 311, r), 80,
                                                                    s, r)))
    cases.append(Case("cv2-restart", "cv2-gray-rst4",
                      lambda: encode_cv2(natural_image(77, 131, 5), 80, restart=4, gray=True)))
    cases.append(Case("cv2-optimized", "cv2-optimized-huffman",
                      lambda: encode_cv2(natural_image(250, 190, 7), 70, "422", optimize=True)))
    cases.append(Case("pillow-gray", "pillow-gray",
                      lambda: encode_pillow(natural_image(211, 157, 8), 75, gray=True)))
    cases.append(Case("large", "cv2-420-4000x3000",
                      lambda: encode_cv2(natural_image(3000, 4000, 9), 90, "420")))
    cases.append(Case("large", "pillow-444-1500x2001",
                      lambda: encode_pillow(natural_image(2001, 1500, 10), 85, 0)))
    return cases
