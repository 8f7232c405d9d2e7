"""The CPU reference path against OpenCV, NumPy (torchvision's CenterCrop rule) and librosa."""

from __future__ import annotations

import cv2
import librosa
import numpy as np
import pytest
from threadpoolctl import threadpool_info

from atoll.bench.corpus import jpeg_bomb, jpeg_bytes, jpeg_scan_bomb, tone
from fpga_host import cpu_backend
from fpga_host.status import PreprocessError, Status


@pytest.fixture(scope="module")
def jpeg():
    return jpeg_bytes(500, 375, seed=1)


def test_decode_is_opencv_rgb(jpeg):
    ref = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
    np.testing.assert_array_equal(cpu_backend.image(jpeg, "decode"), ref)


@pytest.mark.parametrize("size,expected", [((500, 375), (256, 341)), ((375, 500), (341, 256)),
                                           ((300, 300), (256, 256))])
def test_resize_shorter_side(size, expected):
    data = jpeg_bytes(*size)
    out = cpu_backend.image(data, "resize")
    rgb = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
    ref = cv2.resize(rgb, expected[::-1], interpolation=cv2.INTER_LINEAR)
    assert out.shape == expected + (3,)
    np.testing.assert_array_equal(out, ref)


def test_crop_and_normalize_match_torchvision_rule(jpeg):
    resized = cpu_backend.image(jpeg, "resize")  # 256 x 341
    top, left = int(round((256 - 224) / 2)), int(round((341 - 224) / 2))
    crop = cpu_backend.image(jpeg, "crop")
    np.testing.assert_array_equal(crop, resized[top:top + 224, left:left + 224])
    out = cpu_backend.image(jpeg, "normalize")
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    ref = ((crop.astype(np.float32) / np.float32(255) - mean) / std).transpose(2, 0, 1)
    assert out.dtype == np.float32 and out.shape == (3, 224, 224)
    np.testing.assert_array_equal(out, ref)
    half = cpu_backend.image(jpeg, "normalize", cpu_backend.ImageParams(fp16=True))
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, ref.astype(np.float16))


def test_normalize_writes_into_a_callers_buffer(jpeg):
    """Into a slot-like float32 buffer, bit for bit the per-pixel expression (widened from float16
    when asked for); every byte value checked through a synthetic 256 x 3 image."""
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    every = np.stack([np.arange(256, dtype=np.uint8)[:, None].repeat(3, 1)] * 2)  # HWC, 2 x 256
    bgr = every.copy()
    bgr[..., 0] = every[..., 0][::-1]  # a different byte in each channel
    for fp16 in (False, True):
        buf = np.full(3 * 2 * 256 + 5, -1.0, np.float32)
        got = cpu_backend.normalize_bgr(bgr, fp16, out=buf)
        want = ((bgr[..., ::-1].astype(np.float32) / np.float32(255) - mean) / std).transpose(2, 0, 1)
        if fp16:
            want = want.astype(np.float16).astype(np.float32)
        assert np.shares_memory(got, buf) and got.shape == (3, 2, 256)
        np.testing.assert_array_equal(got, want)
        assert (buf[3 * 2 * 256:] == -1).all()  # nothing written past the result
    slot = np.zeros(3 * 224 * 224, np.float32)
    view = cpu_backend.image(jpeg, "normalize", out=slot)
    assert np.shares_memory(view, slot)
    np.testing.assert_array_equal(view, cpu_backend.image(jpeg, "normalize"))


def test_corrupt_and_too_large():
    with pytest.raises(PreprocessError) as err:
        cpu_backend.image(b"\xff\xd8\xff\xe0 not a jpeg", "normalize")
    assert err.value.status == Status.CORRUPT
    with pytest.raises(PreprocessError) as err:
        cpu_backend.image(b"", "normalize")
    assert err.value.status == Status.CORRUPT
    with pytest.raises(PreprocessError) as err:
        cpu_backend.image(jpeg_bytes(300, 200), "normalize", cpu_backend.ImageParams(max_dim=256))
    assert err.value.status == Status.TOO_LARGE
    with pytest.raises(PreprocessError) as err:  # 1,000 scans of 8192x8192 took OpenCV 25 s
        cpu_backend.image(jpeg_scan_bomb(), "normalize")
    assert err.value.status == Status.UNSUPPORTED and "more than 64 scans" in err.value.reason


def _refusal(data: bytes) -> tuple[Status, str]:
    with pytest.raises(PreprocessError) as err:
        cpu_backend.image(data, "normalize")
    return err.value.status, err.value.reason


def test_files_too_short_for_their_frame_are_refused_as_truncated():
    """OpenCV decodes a 662-byte file claiming 8192x8192 whole (384 MB, zero-filled); every
    Huffman-coded block takes at least a bit. A real encoder's flattest image (OpenCV, all zeros,
    quality 10) stays well above that bound."""
    assert _refusal(jpeg_bomb(8192, 8192))[0] == Status.CORRUPT
    assert "truncated" in _refusal(jpeg_bomb(8192, 8192))[1]
    ok, flat = cv2.imencode(".jpg", np.zeros((2048, 2048, 3), np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 10])
    assert cpu_backend.image(flat.tobytes(), "normalize").shape == (3, 224, 224)


def test_arithmetic_coding_is_unsupported():
    """OpenCV's libjpeg decodes arithmetic-coded JPEGs (SOF9), which can code a block in far less
    than a bit; the DPU decodes baseline only."""
    data = bytearray(jpeg_bytes(64, 48))
    sof = data.index(b"\xff\xc0")
    data[sof + 1] = 0xC9
    assert _refusal(bytes(data)) == (Status.UNSUPPORTED, "JPEG coding process SOF9 is not supported (baseline, "
                                                         "extended and progressive Huffman coding are)")  # fmt: skip


@pytest.mark.parametrize("w, h, ok", [(8192, 1, False), (1, 8192, False), (8192, 255, False), (8192, 256, True)])
def test_resized_sizes_past_the_dpu_line_buffers_are_too_large(w, h, ok):
    """The DPU refuses a resize past 8192 on a side (hls/image/image_cu.cpp output_shape); on the
    CPU an 8192x1 image resized to 256x2097152 and took 1.6 GB from a 16 KB file."""
    data = jpeg_bytes(w, h)
    if ok:
        assert cpu_backend.image(data, "normalize").shape == (3, 224, 224)
    else:
        assert _refusal(data)[0] == Status.TOO_LARGE and "over the 8192 pixel limit" in _refusal(data)[1]


def _librosa_reference(y: np.ndarray, sr: int) -> np.ndarray:
    """ARCHITECTURE §4.2 spelled out with librosa."""
    if sr != 16000:
        y = librosa.resample(y, orig_sr=sr, target_sr=16000)
    y = librosa.effects.preemphasis(y, coef=0.97)
    S = librosa.feature.melspectrogram(y=y, sr=16000, n_fft=512, hop_length=160, win_length=400,
                                       window="hann", center=True, pad_mode="constant", power=2.0,
                                       n_mels=80, fmin=0, fmax=8000, htk=False, norm="slaney")
    return np.log(S + 2 ** -24)


@pytest.mark.parametrize("rate,dtype", [(16000, np.int16), (44100, np.float32), (8000, np.int16)])
def test_audio_matches_librosa(rate, dtype):
    pcm = tone(1.0, rate, dtype=dtype)
    y = pcm.astype(np.float32) / 32768 if dtype == np.int16 else pcm
    L = _librosa_reference(y, rate)
    mel = cpu_backend.audio(pcm, rate, "mel")
    assert mel.shape == (80, 1 + 16000 // 160) and mel.dtype == np.float32
    np.testing.assert_allclose(mel, L, rtol=0, atol=1e-5)
    out = cpu_backend.audio(pcm, rate, "normalize")
    ref = (L - L.mean(axis=1, keepdims=True)) / (L.std(axis=1, ddof=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-4)
    np.testing.assert_allclose(out.mean(axis=1), 0, atol=1e-4)
    slot = np.zeros(80 * 200, np.float32)
    for stage, want in (("mel", mel), ("normalize", out)):
        view = cpu_backend.audio(pcm, rate, stage, out=slot)
        assert np.shares_memory(view, slot)
        np.testing.assert_array_equal(view, want)


@pytest.mark.parametrize("pcm,rate,status", [
    (np.zeros(0, np.int16), 16000, Status.EMPTY),
    (np.zeros(16000 * 3, np.int16), 16000, Status.TOO_LONG),
    (np.array([0.0, np.nan, 0.1], np.float32), 16000, Status.NON_FINITE),
    (np.zeros(100, np.int16), 96000, Status.BAD_RATE),
    (np.zeros(100, np.int16), 4000, Status.BAD_RATE),
    (np.zeros((100, 2), np.int16), 16000, Status.BAD_ARGS),
    (np.zeros(100, np.float64), 16000, Status.BAD_ARGS),
    (np.zeros(2, np.float32), 48000, Status.EMPTY),  # resampled to 1 sample: scipy refused in its own words
])
def test_audio_validation(pcm, rate, status):
    with pytest.raises(PreprocessError) as err:
        cpu_backend.audio(pcm, rate, max_seconds=2.0)
    assert err.value.status == status and err.value.reason


def test_pool_in_the_callers_thread_and_spawned(jpeg):
    ref = cpu_backend.image(jpeg, "normalize")
    for workers in (0, 1):
        pool = cpu_backend.CpuPool(workers)
        try:
            array, seconds = pool.image(jpeg, "normalize", cpu_backend.ImageParams()).result(60)
            np.testing.assert_array_equal(array, ref)
            assert seconds > 0
            with pytest.raises(PreprocessError) as err:  # the typed error survives pickling
                pool.image(b"junk", "normalize", cpu_backend.ImageParams()).result(60)
            assert err.value.status == Status.CORRUPT
        finally:
            pool.close()


def test_spawned_workers_run_one_thread_per_native_pool():
    """A worker is one core: BLAS and OpenMP pools of one thread each, or P workers oversubscribe
    P cores with P x cores spinning threads (audio got slower with more processes)."""
    pool = cpu_backend.CpuPool(1)
    try:
        pools = pool._executor.submit(threadpool_info).result(60)
    finally:
        pool.close()
    assert {p["user_api"] for p in pools} >= {"blas"}
    assert [p["num_threads"] for p in pools] == [1] * len(pools)


def test_a_checked_image_skips_the_header_check(monkeypatch):
    """A front end checks every file of a request first (`MediaLimits`); the lane need not again."""
    data = jpeg_bytes(64, 48)
    want = cpu_backend.image(data)

    def refuse(*_):
        raise AssertionError("header checked again")

    monkeypatch.setattr(cpu_backend, "image_size", refuse)
    np.testing.assert_array_equal(cpu_backend.image(data, checked=True), want)
    with pytest.raises(AssertionError):
        cpu_backend.image(data)
    pool = cpu_backend.CpuPool(0)
    done = pool.image(data, "normalize", cpu_backend.ImageParams(), None, checked=True)
    np.testing.assert_array_equal(done.result()[0], want)
