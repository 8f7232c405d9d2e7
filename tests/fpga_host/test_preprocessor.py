"""The Preprocessor facade: results equal the OpenCV/librosa reference; errors are typed."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from fpga_host import cpu_backend
from fpga_host.preprocessor import Preprocessor
from fpga_host.status import PreprocessError, Status
from tests.fpga_host.media import jpeg_bytes, tone


def test_cpu_backend_image_and_audio():
    data = jpeg_bytes(640, 480)
    with Preprocessor("cpu", cpu_workers=0) as pre:
        res = pre.submit_image(data).result(30)
        assert res.backend == "cpu" and res.status == Status.OK and res.fallback_reason is None
        rgb = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
        crop = cv2.resize(rgb, (341, 256), interpolation=cv2.INTER_LINEAR)[16:240, 58:282]
        np.testing.assert_array_equal(pre.submit_image(data, "crop").result(30).array, crop)
        assert res.array.shape == (3, 224, 224) and res.timings["total_ms"] > 0
        audio = pre.submit_audio(tone(0.5, 16000), 16000, "mel").result(30)
        assert audio.array.shape == (80, 51)
        with pytest.raises(PreprocessError) as err:
            pre.submit_image(b"garbage").result(30)
        assert err.value.status == Status.CORRUPT
        with pytest.raises(PreprocessError) as err:
            pre.submit_audio(np.zeros(0, np.int16), 16000).result(30)
        assert err.value.status == Status.EMPTY
        with pytest.raises(ValueError):
            pre.submit_image(data, "blur")


def test_options_reach_the_cpu_path():
    data = jpeg_bytes(400, 300)
    with Preprocessor("cpu", cpu_workers=0, resize_short=128, crop=96, fp16=True) as pre:
        out = pre.submit_image(data).result(30).array
    ref = cpu_backend.image(data, "normalize", cpu_backend.ImageParams(128, 96, True))
    assert out.dtype == np.float16 and out.shape == (3, 96, 96)
    np.testing.assert_array_equal(out, ref)
    with pytest.raises(ValueError):
        Preprocessor("cpu", crop=300)
    with pytest.raises(ValueError):
        Preprocessor("tpu")
