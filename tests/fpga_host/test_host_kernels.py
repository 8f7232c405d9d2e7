"""The CPU path's C steps against their Python references: the same scan counts on real, hostile
and random files, the same normalised bytes as OpenCV's table lookups; and the references in their
place where the library is not built."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from atoll.bench.corpus import jpeg_bytes, jpeg_scan_bomb
from fpga_host import cpu_backend, host_kernels, jpeg_header

pytestmark = pytest.mark.skipif(host_kernels.library() is None, reason="no compiler for the C steps")


def _files() -> list[bytes]:
    plain = jpeg_bytes(64, 48)
    bomb = jpeg_scan_bomb(64, 40)
    second = bomb.index(b"\xff\xda", bomb.index(b"\xff\xda") + 2)
    ok, gray = cv2.imencode(".jpg", np.full((40, 70), 128, np.uint8), [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])
    return [plain, jpeg_bytes(500, 375, seed=3), jpeg_bytes(500, 375, progressive=True), gray.tobytes(), bomb,
            bomb[:second] + b"junk\xff\xff" + bomb[second:],  # junk and fill bytes before a scan
            plain[:2] + b"\xff\xe1\x00\x0a" + b"\xff\xda" * 3 + b"\x00\x00" + plain[2:],  # SOS inside a segment
            b"", b"\xff", b"\xff\xd8", b"\xff\xd8\xff", b"\xff\xd8\xff\xda", b"\xff\xd8\xff\xda\x05",
            b"\xff\xd8\xff\xda\x00\x01\xff\xda\x00\x02", b"\xff\xd8\xff\xd0\xff\x00\xff\x01\xff\xda\x00\x02"]  # fmt: skip


@pytest.mark.parametrize("stop_after", [0, 1, 3, 64, 1000])
@pytest.mark.parametrize("held_below", [host_kernels.SCAN_HELD_BELOW, 0])  # the GIL kept, or let go
def test_scan_counts_match_the_python_walk(stop_after, held_below, monkeypatch):
    monkeypatch.setattr(host_kernels, "SCAN_HELD_BELOW", held_below)
    for data in _files():
        assert host_kernels.scan_count(data, stop_after) == jpeg_header.scan_count(data, stop_after), data[:16]


def test_scan_counts_match_on_every_prefix_and_on_random_bytes():
    """Cut anywhere (a truncated upload), or bytes dense in FF and marker codes: the same count."""
    bomb = jpeg_scan_bomb(32, 12)
    for cut in range(len(bomb) + 1):
        assert host_kernels.scan_count(bomb[:cut], 64) == jpeg_header.scan_count(bomb[:cut], 64), cut
    rng = np.random.default_rng(7)
    alphabet = np.array([0xFF, 0xD8, 0xDA, 0xD9, 0x00, 0x01, 0xD3, 0x02, 0x05, 0xC0], np.uint8)
    for _ in range(2000):
        data = b"\xff\xd8" + rng.choice(alphabet, int(rng.integers(0, 40))).tobytes()
        assert host_kernels.scan_count(data, 8) == jpeg_header.scan_count(data, 8), data


def _crop(data: bytes) -> np.ndarray:
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    return bgr[3:3 + 50, 5:5 + 70]  # rows apart, as a centre crop of the resized image is


@pytest.mark.parametrize("fp16", [False, True])
def test_normalisation_matches_opencvs_lookups(fp16):
    table = cpu_backend._normalize_table(fp16)
    for data in (jpeg_bytes(120, 90, seed=1), jpeg_bytes(97, 61, seed=2)):
        bgr = _crop(data)
        want = np.stack([cv2.LUT(plane, table[c].reshape(256, 1)) for c, plane in enumerate(reversed(cv2.split(bgr)))])
        dst = np.full((3, *bgr.shape[:2]), np.nan, np.float32)
        assert host_kernels.normalize_bgr(bgr, table, dst)
        np.testing.assert_array_equal(dst, want)


def test_normalisation_declines_what_it_does_not_lay_out():
    """Pixels not packed, or a destination not float32 CHW of the image's size: nothing written,
    and `cpu_backend.normalize_bgr` takes OpenCV's path to the same values."""
    table = cpu_backend._normalize_table(False)
    bgr = _crop(jpeg_bytes(120, 90))
    strided = bgr[:, ::2]
    for image, dst in ((strided, np.zeros((3, 50, 35), np.float32)), (bgr, np.zeros((3, 50, 70), np.float64)),
                       (bgr, np.zeros((3, 70, 50), np.float32)), (bgr, np.zeros((3, 50, 140), np.float32)[:, :, ::2])):
        assert not host_kernels.normalize_bgr(image, table, dst)
        assert (dst == 0).all()
    np.testing.assert_array_equal(cpu_backend.normalize_bgr(strided), cpu_backend.normalize_bgr(strided.copy()))


def test_without_the_library_the_references_run(monkeypatch):
    monkeypatch.setattr(host_kernels, "library", lambda: None)
    bomb = jpeg_scan_bomb(64, 5)
    assert host_kernels.scan_count(bomb, 64) == 5
    bgr = _crop(jpeg_bytes(120, 90))
    assert not host_kernels.normalize_bgr(bgr, cpu_backend._normalize_table(False), np.zeros((3, 50, 70), np.float32))
    got = cpu_backend.normalize_bgr(bgr)
    monkeypatch.undo()
    np.testing.assert_array_equal(got, cpu_backend.normalize_bgr(bgr))
