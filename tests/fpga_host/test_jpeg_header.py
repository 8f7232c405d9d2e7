"""SOF header sizes agree with the shape OpenCV decodes."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from atoll.bench.corpus import jpeg_bytes
from fpga_host.jpeg_header import frame_size


@pytest.mark.parametrize("w,h,progressive", [(500, 375, False), (33, 17, True), (1, 2000, False)])
def test_frame_size_matches_opencv(w, h, progressive):
    data = jpeg_bytes(w, h, progressive=progressive)
    assert frame_size(data) == cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).shape[:2]


def test_grayscale_and_garbage():
    ok, buf = cv2.imencode(".jpg", np.full((40, 70), 128, np.uint8))
    assert frame_size(buf.tobytes()) == (40, 70)
    for junk in (b"", b"\xff\xd8", b"\xff\xd8\x00\x00", b"PNG....", b"\xff\xd8\xff\xda\x00\x02"):
        assert frame_size(junk) is None
