"""SOF header sizes agree with the shape OpenCV decodes; scan counts with what libjpeg writes."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from atoll.bench.corpus import jpeg_bytes, jpeg_scan_bomb
from fpga_host.jpeg_header import frame, frame_size, scan_count


@pytest.mark.parametrize("w,h,progressive", [(500, 375, False), (33, 17, True), (1, 2000, False)])
def test_frame_size_matches_opencv(w, h, progressive):
    data = jpeg_bytes(w, h, progressive=progressive)
    assert frame_size(data) == cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).shape[:2]


def test_grayscale_and_garbage():
    ok, buf = cv2.imencode(".jpg", np.full((40, 70), 128, np.uint8))
    assert frame_size(buf.tobytes()) == (40, 70)
    for junk in (b"", b"\xff\xd8", b"\xff\xd8\x00\x00", b"PNG....", b"\xff\xd8\xff\xda\x00\x02"):
        assert frame_size(junk) is None


def test_scan_counts_are_what_libjpeg_writes():
    """Reference: libjpeg's encoder (through OpenCV) writes one interleaved scan for a baseline
    image, and its default progression (jpeg_simple_progression) 10 scans for YCbCr, 6 for gray."""
    assert scan_count(jpeg_bytes(500, 375), 64) == 1
    assert scan_count(jpeg_bytes(500, 375, progressive=True), 64) == 10
    ok, gray = cv2.imencode(".jpg", np.full((40, 70), 128, np.uint8), [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])
    assert scan_count(gray.tobytes(), 64) == 6


def test_no_layout_hides_a_scan():
    """Scans after junk that libjpeg skips, or after fill bytes, are counted; the bytes of an SOS
    marker inside a length-delimited segment (an EXIF thumbnail, say) are not, as libjpeg skips it;
    counting stops one past the bound, so a file of a million scans costs no more than 65."""
    bomb = jpeg_scan_bomb(256, 100)
    assert scan_count(bomb, 1000) == 100
    first = bomb.index(b"\xff\xda")
    second = bomb.index(b"\xff\xda", first + 2)
    junk = bomb[:second] + b"junk\xff\xff" + bomb[second:]
    assert scan_count(junk, 1000) == 100
    app = b"\xff\xe1\x00\x0a" + b"\xff\xda" * 3 + b"\x00\x00"
    plain = jpeg_bytes(64, 48)
    assert scan_count(plain[:2] + app + plain[2:], 64) == 1
    assert scan_count(bomb, 64) == 65
    assert scan_count(b"", 64) == scan_count(b"\xff\xd8", 64) == 0


def test_the_scan_bomb_is_what_it_claims():
    """What `jpeg_scan_bomb` builds is a JPEG OpenCV decodes at the size it claims, scan by scan:
    so the limit is tested against the real attack, not a file that fails early."""
    bomb = jpeg_scan_bomb(512, 3)
    assert frame_size(bomb) == (512, 512)
    assert cv2.imdecode(np.frombuffer(bomb, np.uint8), cv2.IMREAD_COLOR).shape == (512, 512, 3)


def test_frames_declare_process_components_and_blocks():
    """OpenCV's encoder writes YCbCr 4:2:0 (luma 2x2, chroma 1x1) and one-component gray; a
    500x375 4:2:0 frame holds 63x47 luma blocks and 32x24 of each chroma plane."""
    color = frame(jpeg_bytes(500, 375))
    assert (color.process, color.sampling, color.blocks()) == (0, ((2, 2), (1, 1), (1, 1)), 63 * 47 + 2 * 32 * 24)
    assert frame(jpeg_bytes(33, 17, progressive=True)).process == 2
    ok, gray = cv2.imencode(".jpg", np.full((40, 70), 128, np.uint8))
    assert (frame(gray.tobytes()).sampling, frame(gray.tobytes()).blocks()) == (((1, 1),), 5 * 9)
