"""The pynq backend on the emulation through a pynq-shaped adapter (fake_pynq): same answers as the
XRT backend, a hung CU leaves service and its request goes to the CPU, probe and registry see it."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from atoll.bench.corpus import jpeg_bytes, tone
from fpga_host import cpu_backend
from fpga_host.dpu_driver import BackendUnavailable
from fpga_host.manifest import DEFAULT_MANIFEST
from fpga_host.preprocessor import Preprocessor
from fpga_host.probe import probe_backends
from fpga_host.pynq_driver import open_pynq, probe_pynq
from tests.fpga_host import fake_pynq
from tests.fpga_host.fake_dpu import fake_library, use_fake_library  # noqa: F401 (fixtures)


@pytest.fixture
def pynq(monkeypatch, use_fake_library):
    monkeypatch.setitem(sys.modules, "pynq", fake_pynq)
    monkeypatch.setattr(fake_pynq, "HANG_CUS", set())
    return fake_pynq


def test_images_and_audio_match_the_xrt_backend(pynq):
    with Preprocessor("pynq", cpu_workers=0) as over_pynq, Preprocessor("emu", cpu_workers=0) as over_xrt:
        images = [jpeg_bytes(64 + i, 48, seed=i) for i in range(6)]
        for stage in ("normalize", "crop"):
            got = [over_pynq.submit_image(d, stage) for d in images]
            ref = [over_xrt.submit_image(d, stage) for d in images]
            for g, r in zip(got, ref):
                g, r = g.result(10), r.result(10)
                assert g.backend == "pynq" and g.fallback_reason is None
                np.testing.assert_array_equal(g.array, r.array)
        clip = tone(0.4, 22050)
        np.testing.assert_array_equal(over_pynq.submit_audio(clip, 22050).result(10).array,
                                      over_xrt.submit_audio(clip, 22050).result(10).array)
        assert over_pynq.describe()["cus"]["image_cu_4"] == "ok"


def test_a_hung_cu_leaves_service_and_its_request_is_answered_on_the_cpu(pynq):
    pynq.HANG_CUS.add("image_cu_1")
    data = jpeg_bytes(320, 240)
    with Preprocessor("pynq", cpu_workers=0, image_cus=2, cu_timeout_s=0.3) as pre:
        results = [pre.submit_image(data).result(10) for _ in range(3)]
        assert [r.backend for r in results].count("cpu") == 1
        fallback = next(r for r in results if r.backend == "cpu")
        assert "image_cu_1" in fallback.fallback_reason and "TIMEOUT" in fallback.fallback_reason
        np.testing.assert_array_equal(fallback.array, cpu_backend.image(data, "normalize"))
        assert pre.describe()["cus"]["image_cu_1"] == "failed"
        assert pre.submit_image(data).result(10).backend == "pynq"  # image_cu_2 serves on


def test_probe_and_auto_see_pynq(pynq, tmp_path):
    assert probe_pynq(DEFAULT_MANIFEST)["devices"] == ["atoll-emulated-dpu"]
    assert "no built xclbin" in probe_pynq(DEFAULT_MANIFEST)["reason"]
    report = probe_backends()
    assert "pynq" in report["backends"] and report["backend"] == "cpu"  # nothing built to load


def test_without_pynq_the_backend_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynq", None)  # import pynq raises ImportError
    assert not probe_pynq(DEFAULT_MANIFEST)["available"]
    with pytest.raises(BackendUnavailable, match="backend 'pynq' unavailable"):
        open_pynq()
