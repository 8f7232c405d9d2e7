"""jpeg_mcu_strip's C model (after jpeg_decode_core's) gives the column beats today's frame-store
path gives (decode_scan + emit_upsample_columns) on every file of the image-CU decode corpus and
the decode-core testbench's files; a corrupt scan still yields every beat."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "fpga_host"))

import jpeg_corpus as jc  # noqa: E402  (the image-CU tests' corpus)

from sim_tb.jpeg_entropy_decode import scan_files  # noqa: E402
from sim_tb.jpeg_mcu_strip import strip_model  # noqa: E402

CORPUS = {case.name: case for case in jc.decode_corpus()}
SCAN_FILES = scan_files.files()


def check_file(jpeg: bytes, name: str) -> None:
    args = strip_model.strip_args(jpeg)
    assert args is not None, name
    status, rows, beats = strip_model.chain(jpeg, args)
    assert len(beats) == args.beats, (name, len(beats), args.beats)  # every beat, even after a CORRUPT
    want_status, want = strip_model.frame_store_columns(jpeg, args)
    assert status == want_status, (name, status, want_status)
    if status == 0:
        np.testing.assert_array_equal(strip_model.meaningful(beats, args), strip_model.meaningful(want, args),
                                      err_msg=name)
        assert not (beats & ~strip_model.lane_masks(args)).any(), name


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_strip_model_equals_frame_store_path(name):
    check_file(CORPUS[name].make(), name)


@pytest.mark.parametrize("name", sorted(SCAN_FILES))
def test_strip_model_on_scan_files(name):
    check_file(SCAN_FILES[name], name)
