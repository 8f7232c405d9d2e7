"""image_cu stage 0 (JPEG decode) against cv2.imdecode (libjpeg-turbo's default decode)."""

import numpy as np
import pytest

from fpga_host import csim
from jpeg_corpus import cv2_decode_rgb, decode_corpus

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
