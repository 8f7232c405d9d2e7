"""image_cu status codes for media it must refuse (hls/ABI_DPU.md): UNSUPPORTED coding processes
(files written by Pillow and OpenCV), CORRUPT streams, TOO_LARGE frames and BAD_ARGS."""

import numpy as np
import pytest

from fpga_host import csim
from jpeg_corpus import encode_cv2, encode_pillow, natural_image

BASE = encode_cv2(natural_image(120, 160, seed=11), 85, "420")


def segment_offset(data: bytes, marker: int) -> int:
    """Offset of the first segment with this marker (pointing at its 0xFF), by walking headers."""
    at = 2
    while at + 4 <= len(data):
        assert data[at] == 0xFF
        if data[at + 1] == marker:
            return at
        at += 2 + int.from_bytes(data[at + 2:at + 4], "big")
    raise AssertionError(f"marker {marker:#x} not found")


def patched(data: bytes, at: int, new: bytes) -> bytes:
    return data[:at] + new + data[at + len(new):]


def status_of(data: bytes, **kw) -> str:
    return csim.run_image_cu(data, **kw)[0]["status"]


def test_progressive_pillow_is_unsupported():
    assert status_of(encode_pillow(natural_image(64, 80), progressive=True)) == "UNSUPPORTED"


def test_cmyk_pillow_is_unsupported():
    assert status_of(encode_pillow(natural_image(64, 80), mode="CMYK")) == "UNSUPPORTED"


def test_411_sampling_is_unsupported():
    assert status_of(encode_cv2(natural_image(64, 80), 90, "411")) == "UNSUPPORTED"


@pytest.mark.parametrize("sof", [0xC2, 0xC3, 0xC9, 0xCA, 0xCB, 0xCD])
def test_other_coding_processes_are_unsupported(sof):
    # Progressive, lossless and arithmetic frame markers on an otherwise valid file.
    at = segment_offset(BASE, 0xC0)
    assert status_of(patched(BASE, at + 1, bytes([sof]))) == "UNSUPPORTED"


def test_twelve_bit_precision_is_unsupported():
    at = segment_offset(BASE, 0xC0)
    assert status_of(patched(BASE, at + 4, bytes([12]))) == "UNSUPPORTED"


def test_sof1_extended_eight_bit_decodes():
    at = segment_offset(BASE, 0xC0)
    ext = patched(BASE, at + 1, bytes([0xC1]))
    np.testing.assert_array_equal(csim.run_image_cu(ext, stage=0)[1],
                                  csim.run_image_cu(BASE, stage=0)[1])


@pytest.mark.parametrize("data", [b"", b"\xff", b"\xff\xd8", b"\xff\xd8\xff\xd9",
                                  bytes(np.random.default_rng(0).integers(0, 256, 5000,
                                                                          dtype=np.uint8)),
                                  b"\xff\xd8" + bytes(3000)],
                         ids=["empty", "one-byte", "soi-only", "soi-eoi", "random", "zeros"])
def test_garbage_is_corrupt(data):
    assert status_of(data) == "CORRUPT"


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_truncated_file_is_corrupt(fraction):
    assert status_of(BASE[:int(len(BASE) * fraction)]) == "CORRUPT"


def test_truncated_before_last_bytes_is_corrupt():
    assert status_of(BASE[:-40]) == "CORRUPT"


def test_huge_declared_dims_are_too_large_before_decoding():
    at = segment_offset(BASE, 0xC0)
    huge = patched(BASE, at + 5, (60000).to_bytes(2, "big") + (60000).to_bytes(2, "big"))
    status, _ = csim.run_image_cu(huge)
    assert status["status"] == "TOO_LARGE" and (status["src_h"], status["src_w"]) == (60000, 60000)


def test_max_dim_argument_bounds_the_frame():
    assert status_of(BASE, max_dim=159) == "TOO_LARGE"
    assert status_of(BASE, max_dim=160) == "OK"


def test_small_frame_store_is_too_large():
    lib = csim.load_library()
    data = np.frombuffer(BASE, np.uint8)
    scratch = np.zeros(1000, np.uint8)
    out = np.zeros(3 * 224 * 224 * 4, np.uint8)
    words = np.zeros(8, np.uint32)
    lib.image_cu(data.ctypes.data, len(BASE), scratch.ctypes.data, scratch.nbytes,
                 out.ctypes.data, out.nbytes, words.ctypes.data, 3, 256, 224, 0, 8192)
    assert words[0] == 3 and not scratch.any()


@pytest.mark.parametrize("kw", [dict(stage=4), dict(crop=300), dict(crop=0), dict(resize_short=0)])
def test_bad_arguments(kw):
    assert status_of(BASE, **kw) == "BAD_ARGS"


def test_small_output_buffer_is_bad_args():
    lib = csim.load_library()
    data = np.frombuffer(BASE, np.uint8)
    scratch = np.zeros(lib.image_cu_scratch_bytes(256), np.uint8)
    out = np.zeros(3 * 224 * 224 * 4 - 1, np.uint8)
    words = np.zeros(8, np.uint32)
    lib.image_cu(data.ctypes.data, len(BASE), scratch.ctypes.data, scratch.nbytes,
                 out.ctypes.data, out.nbytes, words.ctypes.data, 3, 256, 224, 0, 8192)
    assert words[0] == 4 and not out.any()
