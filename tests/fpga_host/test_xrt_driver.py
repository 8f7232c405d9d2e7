"""The XRT driver on the emulated XRT with a fake kernel library (tests/fpga_host/fake_dpu.c).

References: NumPy evaluations of what the fake kernels compute, and NumPy's ddof=1 std for the
chained mel -> norm result.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import time

import numpy as np
import pytest

from atoll.bench.corpus import jpeg_bytes, tone
from fpga_host import emu_xrt
from fpga_host.dpu_driver import CuFailure
from fpga_host.status import Status
from tests.fpga_host.fake_dpu import fake_driver, fake_library  # noqa: F401 (fixture)

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def expected_crop(data: bytes, crop: int = 224) -> np.ndarray:
    src = np.frombuffer(data, np.uint8)
    return src[np.arange(3 * crop * crop) % src.size].reshape(crop, crop, 3)


def test_concurrent_images_across_cus(fake_library):
    files = [jpeg_bytes(64 + i, 48, seed=i) for i in range(12)]
    driver = fake_driver(fake_library, cu_timeout_s=5, cu_counts={"image_cu": 4})  # 14 requests keep 4 busy
    try:
        futures = [driver.submit_image(f, "normalize") for f in files]
        crops = [driver.submit_image(f, "crop") for f in files[:2]]
        for data, fut in zip(files, futures):
            out = fut.result(10)
            assert out.status == Status.OK and out.array.shape == (3, 224, 224)
            ref = (expected_crop(data).astype(np.float32) / np.float32(255) - MEAN) / STD
            np.testing.assert_allclose(out.array, ref.transpose(2, 0, 1), rtol=0, atol=1e-6)
            assert out.timings["cu_ms"] > 0
        for data, fut in zip(files, crops):
            np.testing.assert_array_equal(fut.result(10).array, expected_crop(data))
    finally:
        driver.close()
    assert fake_library.fake_max_image_concurrency() == 4  # every image CU ran at once
    assert driver.cu_states() == {**{f"image_cu_{i}": "ok" for i in range(1, 5)},
                                  **{f"audio_mel_cu_{i}": "ok" for i in (1, 2)},
                                  **{f"audio_norm_cu_{i}": "ok" for i in (1, 2)}}


def test_status_codes_pass_through(fake_library):
    driver = fake_driver(fake_library)
    try:
        assert driver.submit_image(jpeg_bytes(64, 48, progressive=True)).result(10).status == Status.UNSUPPORTED
        corrupt = driver.submit_image(b"\x00\x01junk").result(10)
        assert corrupt.status == Status.CORRUPT and "malformed" in corrupt.reason
        assert driver.submit_image(b"").result(10).status == Status.CORRUPT
        assert driver.submit_audio(np.zeros(0, np.int16), 16000).result(10).status == Status.EMPTY
        assert driver.submit_audio(tone(0.1, 96000), 96000).result(10).status == Status.BAD_RATE
        long = driver.submit_audio(tone(31, 8000), 8000).result(10)
        assert long.status == Status.TOO_LONG
        assert driver.submit_audio(np.zeros((4, 2), np.int16), 16000).result(10).status == Status.BAD_ARGS
    finally:
        driver.close()


def test_hung_cu_is_retired_and_others_keep_working(fake_library):
    driver = fake_driver(fake_library, hang={"image_cu_2"}, cu_timeout_s=0.3)
    try:
        futures = [driver.submit_image(jpeg_bytes(32, 32, seed=i)) for i in range(8)]
        outcomes = []
        for fut in futures:
            try:
                outcomes.append(fut.result(10).status)
            except CuFailure as exc:
                outcomes.append(str(exc))
        failures = [o for o in outcomes if isinstance(o, str)]
        assert len(failures) == 1 and "image_cu_2" in failures[0] and "TIMEOUT" in failures[0]
        assert outcomes.count(Status.OK) == 7
        assert driver.cu_states()["image_cu_2"] == "failed"
        assert driver.cu_states()["image_cu_1"] == "ok"
    finally:
        driver.close()


def test_all_cus_failed_means_cpu(fake_library):
    driver = fake_driver(fake_library, hang={"image_cu_1"}, cu_timeout_s=0.2, cu_counts={"image_cu": 1})
    try:
        with pytest.raises(CuFailure, match="TIMEOUT"):
            driver.submit_image(jpeg_bytes(32, 32)).result(10)
        with pytest.raises(CuFailure, match="no working image_cu CU .image_cu_1 failed"):
            driver.submit_image(jpeg_bytes(32, 32)).result(10)
    finally:
        driver.close()


def test_a_cu_that_ran_late_is_back_in_service_once_its_command_ends(fake_library, caplog):
    """A timeout retired its CU for good: four legal 8192x8192 JPEGs, slower than the timeout in C
    simulation on two cores, left an emulated DPU with no image CU. Now the CU is out of service
    only until the command that timed out ends."""
    driver = fake_driver(fake_library, hang={"image_cu_1"}, cu_timeout_s=0.2, cu_counts={"image_cu": 1})
    try:
        with caplog.at_level(logging.INFO, logger="fpga_host.dpu_driver"):
            with pytest.raises(CuFailure, match="TIMEOUT"):
                driver.submit_image(jpeg_bytes(32, 32)).result(10)
            assert driver.cu_states()["image_cu_1"] == "failed"
            emu_xrt.hang(driver.port.device, {"image_cu_1"}, hung=False)  # the late command ends
            deadline = time.monotonic() + 60
            while driver.cu_states()["image_cu_1"] != "ok":
                assert time.monotonic() < deadline, "the CU never came back"
                time.sleep(0.01)
            assert driver.submit_image(jpeg_bytes(32, 32)).result(10).status == Status.OK
        said = [r.getMessage() for r in caplog.records]
        assert any("out of service until it ends" in m for m in said) and any("back in service" in m for m in said)
    finally:
        driver.close()


def test_audio_chain_mel_then_norm(fake_library):
    clips = [tone(s, r, dtype=d) for s, r, d in
             [(0.5, 16000, np.int16), (1.0, 44100, np.float32), (0.3, 8000, np.int16),
              (0.7, 22050, np.float32), (0.4, 16000, np.int16), (0.2, 48000, np.int16)]]
    rates = [16000, 44100, 8000, 22050, 16000, 48000]
    driver = fake_driver(fake_library)
    try:
        mels = [driver.submit_audio(c, r, "mel") for c, r in zip(clips, rates)]
        norms = [driver.submit_audio(c, r) for c, r in zip(clips, rates)]
        for clip, rate, m, n in zip(clips, rates, mels, norms):
            mel, norm = m.result(10), n.result(10)
            frames = 1 + (clip.size * 16000 // rate) // 160
            first = abs(clip[0] / 32768 if clip.dtype == np.int16 else clip[0])
            ref = (np.arange(80, dtype=np.float32)[:, None] + np.float32(0.25)
                   * np.arange(frames, dtype=np.float32) + np.float32(first))
            np.testing.assert_allclose(mel.array, ref, rtol=1e-6)
            expected = (ref - ref.mean(1, keepdims=True)) / (ref.std(1, ddof=1, keepdims=True) + 1e-5)
            np.testing.assert_allclose(norm.array, expected, rtol=0, atol=1e-4)
            assert {"mel_cu_ms", "norm_cu_ms"} <= norm.timings.keys()
    finally:
        driver.close()
    assert fake_library.fake_mel_norm_overlapped() == 1  # a mel CU ran while a norm CU did


def test_hung_norm_cu(fake_library):
    driver = fake_driver(fake_library, hang={"audio_norm_cu_1"}, cu_timeout_s=0.2,
                         cu_counts={"audio_norm_cu": 1})
    try:
        with pytest.raises(CuFailure, match="audio_norm_cu_1"):
            driver.submit_audio(tone(0.2, 16000), 16000).result(10)
        # mel-only requests do not need the failed norm CU
        assert driver.submit_audio(tone(0.2, 16000), 16000, "mel").result(10).status == Status.OK
    finally:
        driver.close()


def test_many_concurrent_audio_requests_complete(fake_library):
    driver = fake_driver(fake_library)
    try:
        futures = [driver.submit_audio(tone(0.2, 16000, seed=i), 16000) for i in range(10)]
        done, _ = cf.wait(futures, timeout=20)
        assert len(done) == 10 and all(f.result().status == Status.OK for f in futures)
    finally:
        driver.close()
