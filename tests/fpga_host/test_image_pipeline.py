"""image_cu stages 1-3 against their references: cv2.resize(INTER_LINEAR) of the cv2.imdecode
image, torchvision CenterCrop's offset rule, and the NumPy float32 normalisation expression."""

from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import pytest
from jpeg_corpus import cv2_decode_rgb, encode_cv2, natural_image

from fpga_host import csim

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)

# (h, w, R): downscales, upscales, odd sizes, an exact 2x, extreme aspect ratios.
RESIZE_CASES = [(375, 500, 256), (500, 375, 256), (512, 512, 256), (333, 257, 256),
                (101, 77, 256), (77, 101, 224), (1000, 999, 256), (17, 300, 64), (300, 17, 64),
                (256, 256, 256), (240, 321, 299), (64, 48, 100), (33, 31, 7), (720, 1280, 256),
                (9, 9, 1), (257, 255, 128)]


def torchvision_resize_dims(h: int, w: int, r: int) -> tuple[int, int]:
    """torchvision.transforms.Resize(r) output size: shorter side r, longer int(r * long / short)."""
    return (r, int(r * w / h)) if h <= w else (int(r * h / w), r)


def torchvision_crop_offsets(h: int, w: int, c: int) -> tuple[int, int]:
    """torchvision.transforms.CenterCrop(c) placement."""
    return int(round((h - c) / 2.0)), int(round((w - c) / 2.0))


def reference_resize(data: bytes, r: int) -> np.ndarray:
    rgb = cv2_decode_rgb(data)
    h, w = torchvision_resize_dims(*rgb.shape[:2], r)
    return cv2.resize(rgb, (w, h), interpolation=cv2.INTER_LINEAR)


def reference_normalize(crop: np.ndarray) -> np.ndarray:
    chw = crop.transpose(2, 0, 1).astype(np.float32)
    return (chw / np.float32(255) - MEAN[:, None, None]) / STD[:, None, None]


@pytest.mark.parametrize("h,w,r", RESIZE_CASES)
def test_resize_matches_cv2_inter_linear(h, w, r):
    data = encode_cv2(natural_image(h, w, seed=h * 7 + w), 90, "420")
    status, out = csim.run_image_cu(data, stage=1, resize_short=r)
    assert status["status"] == "OK"
    np.testing.assert_array_equal(out, reference_resize(data, r))


@pytest.mark.parametrize("h,w,r,c", [(375, 500, 256, 224), (333, 257, 256, 224),
                                     (101, 77, 64, 63), (90, 91, 31, 30), (200, 300, 100, 100)])
def test_crop_is_torchvision_center_crop(h, w, r, c):
    data = encode_cv2(natural_image(h, w, seed=3), 85, "422")
    status, out = csim.run_image_cu(data, stage=2, resize_short=r, crop=c)
    resized = reference_resize(data, r)
    top, left = torchvision_crop_offsets(*resized.shape[:2], c)
    assert status["status"] == "OK" and (status["h"], status["w"]) == (c, c)
    np.testing.assert_array_equal(out, resized[top:top + c, left:left + c])


def test_crop_offset_rounds_half_to_even():
    # resized 256 x 341 (from 375 x 500): (341 - 224) / 2 = 58.5 rounds to 58 in Python.
    assert torchvision_crop_offsets(256, 341, 224) == (16, 58)
    data = encode_cv2(natural_image(375, 500, seed=4), 90, "420")
    _, out = csim.run_image_cu(data, stage=2)
    np.testing.assert_array_equal(out, reference_resize(data, 256)[16:240, 58:282])


@pytest.mark.parametrize("sampling", ["444", "420"])
def test_normalize_float32_matches_numpy(sampling):
    data = encode_cv2(natural_image(375, 500, seed=5), 90, sampling)
    _, crop = csim.run_image_cu(data, stage=2)
    status, out = csim.run_image_cu(data, stage=3)
    assert status["status"] == "OK" and out.dtype == np.float32 and out.shape == (3, 224, 224)
    assert status["bytes_written"] == out.nbytes
    expected = reference_normalize(crop)
    np.testing.assert_array_equal(out, expected)  # bit-exact, stronger than the 1e-6 bound
    # End to end against the references alone (cv2 decode + cv2 resize + crop + numpy).
    resized = reference_resize(data, 256)
    top, left = torchvision_crop_offsets(*resized.shape[:2], 224)
    np.testing.assert_allclose(out, reference_normalize(resized[top:top + 224, left:left + 224]),
                               rtol=0, atol=1e-6)


def test_normalize_float16_matches_numpy_astype():
    data = encode_cv2(natural_image(300, 400, seed=6), 80, "420")
    _, crop = csim.run_image_cu(data, stage=2)
    status, out = csim.run_image_cu(data, stage=3, out_fp16=True)
    assert out.dtype == np.float16 and status["bytes_written"] == out.nbytes
    np.testing.assert_array_equal(out.view(np.uint16),
                                  reference_normalize(crop).astype(np.float16).view(np.uint16))


def test_every_byte_value_normalizes_like_numpy():
    # A 16 x 16 grey ramp covers all 256 inputs of each channel's table.
    ramp = np.arange(256, dtype=np.uint8).reshape(16, 16)
    data = encode_cv2(np.repeat(ramp[:, :, None], 3, axis=2), 100, "444")
    _, crop = csim.run_image_cu(data, stage=2, resize_short=16, crop=16)
    _, out32 = csim.run_image_cu(data, stage=3, resize_short=16, crop=16)
    _, out16 = csim.run_image_cu(data, stage=3, resize_short=16, crop=16, out_fp16=True)
    assert len(np.unique(crop)) > 200
    np.testing.assert_array_equal(out32, reference_normalize(crop))
    np.testing.assert_array_equal(out16, reference_normalize(crop).astype(np.float16))


def test_runs_are_idempotent_over_a_dirty_frame_store():
    lib = csim.load_library()
    scratch = np.full(lib.image_cu_scratch_bytes(512), 0xA5, np.uint8)
    out = np.zeros(3 * 224 * 224 * 4, np.uint8)
    words = np.zeros(8, np.uint32)

    def run(data: bytes) -> np.ndarray:
        buf = np.frombuffer(data, np.uint8)
        lib.image_cu(buf.ctypes.data, len(data), scratch.ctypes.data, scratch.nbytes,
                     out.ctypes.data, out.nbytes, words.ctypes.data, 3, 256, 224, 0, 512)
        assert words[0] == 0
        return out.copy()

    a = encode_cv2(natural_image(120, 160, seed=1), 90, "420")
    b = encode_cv2(natural_image(390, 410, seed=2), 60, "444")
    first = run(a)
    run(b)  # leaves a larger frame in the shared frame store
    np.testing.assert_array_equal(run(a), first)
    np.testing.assert_array_equal(first, csim.run_image_cu(a)[1].view(np.uint8).ravel())


def test_concurrent_runs_on_threads_match_serial_runs():
    # The emulated XRT runs one CU per thread through ctypes (GIL released): no shared state.

    files = [encode_cv2(natural_image(150 + 9 * i, 200 - 7 * i, seed=i), 80, "420")
             for i in range(8)]
    serial = [csim.run_image_cu(f)[1] for f in files]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(lambda f: csim.run_image_cu(f)[1], files * 2))
    for i, out in enumerate(parallel):
        np.testing.assert_array_equal(out, serial[i % len(files)])
