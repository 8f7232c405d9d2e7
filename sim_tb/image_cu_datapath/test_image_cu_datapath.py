"""The whole image-CU datapath in one RTL simulation (hls/rtl/image_cu_datapath.v: decode core ->
MCU strip -> upsample_color -> image_postdecode) on real JPEG files from the first scan byte to the
last output beat, every beat and status against the four C models chained, within a cycle limit,
one file after another on one datapath, with idle input and output backpressure.
Small files on Icarus here; `atoll bench dpu` runs the large ones on Verilator."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sim_tb.image_cu_datapath import datapath_sim as ds  # noqa: E402
from sim_tb.jpeg_entropy_decode import scan_files  # noqa: E402

# (file of scan_files, resize_short, crop, format): ImageNet-style float32, the identity in uint8,
# float16, a corrupt scan (every beat still leaves), and a file after it.
CASES = [("cv2-420-q90-48x64", 32, 28, ds.F32), ("cv2-444-q75-33x31", None, None, ds.U8),
         ("truncated", 40, 32, ds.F32), ("cv2-gray-rst4-45x61", 24, 20, ds.F16),
         ("cv2-422-q95-17x9", 12, None, ds.U8)]


def test_image_cu_datapath(tmp_path):
    """The files one after another with 48/256 of the cycles idle on the input and stalled on the
    output (full rate is `atoll bench dpu`'s)."""
    files = scan_files.files()
    jobs = [ds.job(name, files[name], r, crop, fmt) for name, r, crop, fmt in CASES]
    results = ds.run(jobs, tmp_path, params=ds.harness_params(jobs, stalls=48))
    assert [r.status for r in results] == [0, 0, ds.CORRUPT, 0, 0]
