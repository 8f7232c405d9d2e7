"""The scan's way into the decode core (hls/image/jpeg_scan_feed.h, one DATAFLOW region with the
core and the MCU strip): files that end at or just after the start of the scan come back CORRUPT
(the region completes: the feeder still marks the file's end, the core pads the blocks it could not
decode), and a scan starting at every offset within an 8-byte group decodes as before."""

import numpy as np
import pytest

from fpga_host import csim
from jpeg_corpus import cv2_decode_rgb, encode_cv2, natural_image

BASE = encode_cv2(natural_image(40, 56, seed=5), 80, "420")


def scan_start(data: bytes) -> int:
    """Offset of the first entropy-coded byte: after the SOS segment."""
    at = 2
    while data[at + 1] != 0xDA:
        at += 2 + int.from_bytes(data[at + 2:at + 4], "big")
    return at + 2 + int.from_bytes(data[at + 2:at + 4], "big")


@pytest.mark.parametrize("extra", [0, 1, 7, 8, 9, 63, 64, 65])
def test_file_ending_early_in_the_scan_is_corrupt(extra):
    status, _ = csim.run_image_cu(BASE[:scan_start(BASE) + extra], stage=0)
    assert status["status"] == "CORRUPT" and status["bytes_written"] == 0


@pytest.mark.parametrize("pad", range(8))
def test_scan_at_each_offset_of_a_beat_decodes_exactly(pad):
    # A COM segment of `pad` bytes before the frame shifts the scan's start by pad + 4 bytes.
    data = BASE[:2] + b"\xff\xfe" + (pad + 2).to_bytes(2, "big") + bytes(pad) + BASE[2:]
    assert scan_start(data) % 8 == (scan_start(BASE) + pad + 4) % 8
    status, rgb = csim.run_image_cu(data, stage=0)
    assert status["status"] == "OK"
    np.testing.assert_array_equal(rgb, cv2_decode_rgb(data))
