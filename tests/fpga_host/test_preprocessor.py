"""The Preprocessor facade: results equal the OpenCV/librosa reference; errors are typed."""

from __future__ import annotations

import os
import resource
import signal

import cv2
import numpy as np
import pytest

from atoll.bench.corpus import jpeg_bomb, jpeg_bytes, tone
from fpga_host import cpu_backend
from fpga_host.preprocessor import Preprocessor
from fpga_host.probe import probe_backends
from fpga_host.status import PreprocessError, Status
from fpga_host.xrt_driver import BackendUnavailable


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


def test_image_now_is_what_the_future_holds_on_the_calling_thread():
    """`image_now` (a lane's call): the CPU path's result into the caller's buffer, with its
    timings, and its errors raised, as `submit_image(...).result()` gives them."""
    data = jpeg_bytes(320, 240, seed=4)
    with Preprocessor("cpu", cpu_workers=0) as pre:
        out = np.zeros(3 * 224 * 224 + 7, np.float32)
        now = pre.image_now(data, out=out)
        later = pre.submit_image(data).result(30)
        assert (now.backend, now.status, now.fallback_reason) == ("cpu", Status.OK, None)
        assert np.shares_memory(now.array, out) and now.timings["total_ms"] >= now.timings["compute_ms"] > 0
        np.testing.assert_array_equal(now.array, later.array)
        with pytest.raises(PreprocessError) as err:
            pre.image_now(b"garbage")
        assert err.value.status == Status.CORRUPT


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


# -- the emu backend over the fake DPU library (tests/fpga_host/fake_dpu.c) ----------------------

from tests.fpga_host.fake_dpu import fake_library, use_fake_library  # noqa: E402,F401 (fixtures)


def test_emu_backend_results_come_from_the_cus(use_fake_library):
    data = jpeg_bytes(64, 48)
    with Preprocessor("emu", cpu_workers=0) as pre:
        assert pre.backend == "emu"
        res = pre.submit_image(data, "crop").result(10)
        src = np.frombuffer(data, np.uint8)
        np.testing.assert_array_equal(res.array, src[np.arange(224 * 224 * 3) % src.size].reshape(224, 224, 3))
        assert res.backend == "emu" and res.fallback_reason is None and "cu_ms" in res.timings


def test_unsupported_jpeg_is_redone_on_cpu(use_fake_library):
    data = jpeg_bytes(300, 200, progressive=True)
    with Preprocessor("emu", cpu_workers=0) as pre:
        res = pre.submit_image(data).result(10)
        assert pre.image_now(data).fallback_reason == res.fallback_reason  # with a DPU: its run, waited for
    assert res.backend == "cpu" and "UNSUPPORTED" in res.fallback_reason
    np.testing.assert_array_equal(res.array, cpu_backend.image(data, "normalize"))


def test_corrupt_on_dpu_raises(use_fake_library):
    with Preprocessor("emu", cpu_workers=0) as pre:
        with pytest.raises(PreprocessError) as err:
            pre.submit_image(b"\x00garbage").result(10)
        assert err.value.status == Status.CORRUPT and "malformed" in err.value.reason
        with pytest.raises(PreprocessError) as err:
            pre.submit_audio(np.zeros(100, np.int16), 4000).result(10)
        assert err.value.status == Status.BAD_RATE


def test_cu_timeout_completes_on_cpu(use_fake_library, monkeypatch):
    monkeypatch.setenv("ATOLL_EMU_HANG_CUS", "image_cu_1,audio_mel_cu_1")
    data = jpeg_bytes(320, 240)
    with Preprocessor("emu", cpu_workers=0, image_cus=1, audio_mel_cus=1, cu_timeout_s=0.2) as pre:
        res = pre.submit_image(data).result(10)
        assert res.backend == "cpu" and "image_cu_1" in res.fallback_reason
        np.testing.assert_array_equal(res.array, cpu_backend.image(data, "normalize"))
        again = pre.submit_image(data).result(10)
        assert again.backend == "cpu" and "no working image_cu" in again.fallback_reason
        clip = tone(0.5, 16000)
        audio = pre.submit_audio(clip, 16000).result(10)
        assert audio.backend == "cpu" and "audio_mel_cu_1" in audio.fallback_reason
        np.testing.assert_array_equal(audio.array, cpu_backend.audio(clip, 16000))


def test_forced_backend_that_cannot_open_fails_clearly():
    with pytest.raises(BackendUnavailable, match="backend 'xrt' unavailable: .*pyxrt"):
        Preprocessor("xrt")


# -- the emu backend over the real image CU (the HLS C++ built by fpga_host.csim) ----------------

@pytest.mark.parametrize("size", [(500, 375), (333, 500), (64, 48)])
def test_emu_image_cu_equals_opencv(size):
    data = jpeg_bytes(*size, seed=7)
    rgb = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
    slot = np.zeros(3 * 224 * 224, np.float32)
    with Preprocessor("emu", cpu_workers=0, audio_mel_cus=0, audio_norm_cus=0) as pre:
        decoded = pre.submit_image(data, "decode").result(60)
        normalized = pre.submit_image(data, "normalize").result(60)
        in_slot = pre.submit_image(data, "normalize", out=slot).result(60)
    assert decoded.backend == "emu" and normalized.backend == "emu"
    np.testing.assert_array_equal(decoded.array, rgb)  # libjpeg-turbo via cv2.imdecode
    np.testing.assert_array_equal(normalized.array, cpu_backend.image(data, "normalize"))
    assert np.shares_memory(in_slot.array, slot)  # the CU's output read straight into the slot
    np.testing.assert_array_equal(in_slot.array, normalized.array)


# -- the emu backend over the real audio CUs, chained mel -> norm, against librosa ----------------

@pytest.mark.parametrize("seconds,rate,dtype", [(1.0, 16000, np.int16), (0.5, 8000, np.float32),
                                                (1.3, 44100, np.int16), (0.7, 22050, np.float32)])
def test_emu_audio_cus_close_to_librosa(seconds, rate, dtype):
    pcm = tone(seconds, rate, dtype=dtype)
    with Preprocessor("emu", cpu_workers=0, image_cus=0) as pre:
        mel = pre.submit_audio(pcm, rate, "mel").result(60)
        norm = pre.submit_audio(pcm, rate).result(60)
    assert mel.backend == norm.backend == "emu" and {"mel_cu_ms", "norm_cu_ms"} <= norm.timings.keys()
    # librosa via the CPU path (itself checked against librosa in test_cpu_backend.py)
    np.testing.assert_allclose(mel.array, cpu_backend.audio(pcm, rate, "mel"), atol=1e-3)
    np.testing.assert_allclose(norm.array, cpu_backend.audio(pcm, rate), atol=1e-3)


def test_close_answers_every_accepted_request(use_fake_library):
    pre = Preprocessor("emu", cpu_workers=0)
    futures = [pre.submit_audio(tone(0.3, 16000, seed=i), 16000) for i in range(8)]
    futures += [pre.submit_image(jpeg_bytes(64, 48, seed=i)) for i in range(8)]
    futures.append(pre.submit_image(jpeg_bytes(64, 48, progressive=True)))  # DPU, then CPU
    pre.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert futures[-1].result().backend == "cpu"


def test_probe_never_raises_and_explains(tmp_path):
    report = probe_backends()
    assert report["backend"] in ("xrt", "emu", "cpu") and report["backends"]["cpu"]["available"]
    xrt = report["backends"]["xrt"]
    assert xrt["available"] or xrt["reason"]
    broken = probe_backends(tmp_path / "missing.json")
    assert broken["backend"] == "cpu" or broken["backends"]["xrt"]["available"]
    assert "cannot read manifest" in broken["backends"]["emu"]["reason"]


@pytest.mark.parametrize("backend", ["cpu", "emu"])
def test_a_header_dimension_bomb_is_refused_before_any_decode(backend):
    """A < 1 KB file claiming 30000x30000: TOO_LARGE from its header on every backend (OpenCV
    decoding it first took 9 s and 5.5 GB), without touching the process's peak memory."""
    with Preprocessor(backend, cpu_workers=0) as pre:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with pytest.raises(PreprocessError) as info:
            pre.submit_image(jpeg_bomb()).result(timeout=60)
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
    assert info.value.status == Status.TOO_LARGE and "30000x30000" in str(info.value)
    assert grown_mb < 50


def test_a_killed_preprocessing_process_is_replaced_and_its_request_run_again():
    """SIGKILL of a pool process once broke the pool for good (every later request: 500
    BrokenProcessPool); now the pool is replaced and the lost request runs once more."""
    jpeg = jpeg_bytes(320, 240, seed=3)
    with Preprocessor("cpu", cpu_workers=1) as pre:
        before = pre.submit_image(jpeg).result(timeout=120).array
        [pid] = list(pre._cpu._executor._processes)
        os.kill(pid, signal.SIGKILL)
        after = [pre.submit_image(jpeg).result(timeout=120).array for _ in range(3)]
    assert all(np.array_equal(before, a) for a in after)
