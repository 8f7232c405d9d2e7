"""image_cu stage 0 (JPEG decode) against cv2.imdecode (libjpeg-turbo's default decode)."""

import io

import cv2
import numpy as np
import pytest
from jpeg_corpus import cv2_decode_rgb, decode_corpus, encode_cv2, natural_image
from PIL import Image

from fpga_host import csim

CASES = decode_corpus()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_decode_matches_cv2_imdecode(case):
    data = case.make()
    status, rgb = csim.run_image_cu(data, stage=0)
    reference = cv2_decode_rgb(data)
    assert status["status"] == "OK", status
    assert (status["h"], status["w"], status["c"]) == reference.shape
    assert (status["src_h"], status["src_w"]) == reference.shape[:2]
    assert status["bytes_written"] == reference.size
    diff = np.abs(rgb.astype(np.int16) - reference)
    assert diff.max() <= 1
    assert (diff == 0).mean() >= 0.999


def test_grayscale_is_replicated_to_rgb():
    data = next(c for c in CASES if c.kind == "cv2-gray").make()
    status, rgb = csim.run_image_cu(data, stage=0)
    assert status["n_components"] == 1
    assert (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 0] == rgb[..., 2]).all()


def without_jfif(data: bytes) -> bytes:
    """The file with its JFIF APP0 segment removed (cv2 writes it right after SOI)."""
    assert data[2:4] == b"\xff\xe0"
    return data[:2] + data[4 + int.from_bytes(data[4:6], "big"):]


@pytest.mark.parametrize("transform", [0, 1])
def test_adobe_transform_selects_rgb_or_ycbcr_like_libjpeg(transform):
    # Adobe APP14 transform 0 declares the components R, G, B (no colour conversion).
    adobe = b"\xff\xee\x00\x0eAdobe\x00\x64\x00\x00\x00\x00" + bytes([transform])
    base = without_jfif(encode_cv2(natural_image(70, 90, seed=3), 90, "420"))
    data = base[:2] + adobe + base[2:]
    status, rgb = csim.run_image_cu(data, stage=0)
    assert status["status"] == "OK"
    np.testing.assert_array_equal(rgb, cv2_decode_rgb(data))


def test_component_ids_rgb_without_markers_mean_rgb():
    data = bytearray(without_jfif(encode_cv2(natural_image(40, 50, seed=4), 90, "444")))
    sof, sos = data.find(b"\xff\xc0"), data.find(b"\xff\xda")
    for i, cid in enumerate(b"RGB"):
        data[sof + 10 + 3 * i] = cid
        data[sos + 5 + 2 * i] = cid
    status, rgb = csim.run_image_cu(bytes(data), stage=0)
    assert status["status"] == "OK"
    np.testing.assert_array_equal(rgb, cv2_decode_rgb(bytes(data)))


def test_exif_orientation_is_not_applied():
    # Reference is cv2.imdecode with IMREAD_IGNORE_ORIENTATION; plain IMREAD_COLOR would rotate.


    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    buf = io.BytesIO()
    Image.fromarray(natural_image(60, 100, seed=5)).save(buf, format="JPEG", quality=90,
                                                          exif=exif.tobytes())
    data = buf.getvalue()
    status, rgb = csim.run_image_cu(data, stage=0)
    assert (status["h"], status["w"]) == (60, 100)
    np.testing.assert_array_equal(rgb, cv2_decode_rgb(data))
    rotated = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert rotated.shape[:2] == (100, 60)
