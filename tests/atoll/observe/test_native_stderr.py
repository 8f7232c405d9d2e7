"""Native libraries' standard error in a front end: libjpeg's warnings about corrupt images (the
reference: OpenCV's own libjpeg, printing to descriptor 2) become throttled log records, while
Python's logging stays unthrottled on the real standard error. In a process of its own, since the
capture takes over descriptor 2."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import logging, os
import cv2, numpy as np
from atoll.observe import native_stderr
from atoll.bench.corpus import jpeg_bytes

native_stderr.BURST, native_stderr.WINDOW_S = 5, 1e9
forwarder = native_stderr.capture()
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
broken = jpeg_bytes(16, 16)
broken = broken[:-2] + b"junk" + broken[-2:]  # extraneous bytes before EOI: one warning per decode
for i in range(50):
    cv2.imdecode(np.frombuffer(broken, np.uint8), cv2.IMREAD_COLOR)
    logging.getLogger("atoll.test").info("own line %d", i)
os.close(2)  # the pipe's only writer: the forwarder reads to its end
forwarder.join()
"""


def test_libjpeg_warnings_are_throttled_log_records_and_python_logging_is_not():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True)
    lines = out.stderr.splitlines()
    native = [line for line in lines if line.startswith("atoll.native: ")]
    assert native[:5] == ["atoll.native: Corrupt JPEG data: 4 extraneous bytes before marker 0xd9"] * 5
    assert native[5:] == ["atoll.native: 45 more lines from native libraries in 0 s, not shown"]
    assert [line for line in lines if line.startswith("atoll.test: ")] == [f"atoll.test: own line {i}" for i in range(50)]
    assert not [line for line in lines if line.startswith("Corrupt JPEG")]  # nothing printed past the capture
