"""Fuzzing image_cu under AddressSanitizer + UndefinedBehaviorSanitizer for a bounded time.

A C++ driver (image_cu_fuzz.cpp) linked with the kernel sources mutates seed JPEGs written by
OpenCV and Pillow and fails on any sanitizer report, crash, hang (per-input alarm) or status
outside {OK, UNSUPPORTED, CORRUPT, TOO_LARGE}. Set ATOLL_FUZZ_SECONDS to fuzz longer locally.
"""

import os
import subprocess
from pathlib import Path

import pytest

from fpga_host import csim
from jpeg_corpus import encode_cv2, encode_pillow, natural_image

FUZZ_SECONDS = float(os.environ.get("ATOLL_FUZZ_SECONDS", "30"))
SANITIZER_FLAGS = ("-O1", "-g", "-std=c++17", "-fsanitize=address,undefined",
                   "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-Wno-unknown-pragmas")
DRIVER = Path(__file__).with_name("image_cu_fuzz.cpp")


def seed_files(tmp_path: Path) -> list[Path]:
    img = natural_image(40, 56, seed=21)
    seeds = {
        "420.jpg": encode_cv2(img, 75, "420"),
        "422-rst.jpg": encode_cv2(img, 90, "422", restart=2),
        "440.jpg": encode_cv2(img, 60, "440"),
        "444-opt.jpg": encode_cv2(img, 95, "444", optimize=True),
        "gray.jpg": encode_cv2(img, 80, gray=True),
        "pillow.jpg": encode_pillow(natural_image(33, 17, seed=22), 70, 2),
        "progressive.jpg": encode_pillow(img, 70, 2, progressive=True),
    }
    paths = []
    for name, data in seeds.items():
        paths.append(tmp_path / name)
        paths[-1].write_bytes(data)
    return paths


@pytest.mark.slow
def test_image_cu_survives_fuzzing_under_asan(tmp_path):
    # The image folder: image_cu.cpp and the C models of the RTL blackboxes it calls.
    driver = csim.compile_cached([csim.HLS_DIR / "image", DRIVER],
                                 SANITIZER_FLAGS, csim.REPO_ROOT / "build" / "fuzz", "image_cu_fuzz")
    crash_file = tmp_path / "crash.jpg"
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    result = subprocess.run([str(driver), "100000000", str(FUZZ_SECONDS), "20261123",
                             str(crash_file), *map(str, seed_files(tmp_path))],
                            capture_output=True, text=True, env=env, timeout=FUZZ_SECONDS + 120)
    assert result.returncode == 0, (
        f"fuzzing failed (input left in {crash_file}):\n{result.stderr[-6000:]}")
    assert "runtime error" not in result.stderr and "Sanitizer" not in result.stderr
    counts = dict(zip(result.stdout.split()[::2], map(int, result.stdout.split()[1::2])))
    assert counts["iterations"] > 200
    assert counts["ok"] > 0 and counts["corrupt"] > 0 and counts["unsupported"] > 0
