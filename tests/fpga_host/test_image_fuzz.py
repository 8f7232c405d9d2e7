"""Fuzzing image_cu under AddressSanitizer + UndefinedBehaviorSanitizer for a bounded time.

A C++ driver (image_cu_fuzz.cpp) linked with the kernel sources mutates seed JPEGs written by
OpenCV and Pillow and fails on any sanitizer report, crash, hang (per-input alarm) or status
outside {OK, UNSUPPORTED, CORRUPT, TOO_LARGE}. Set ATOLL_FUZZ_SECONDS to fuzz longer locally,
ATOLL_FUZZ_SEED to draw other mutations. What it found lives in regressions/, replayed by the
same sanitizer build on every run (the driver's `replay` mode).
"""

import os
import subprocess
from pathlib import Path

import pytest

from fpga_host import cpu_backend, csim
from fpga_host.status import PreprocessError, Status
from jpeg_corpus import encode_cv2, encode_pillow, natural_image

FUZZ_SECONDS = float(os.environ.get("ATOLL_FUZZ_SECONDS", "15"))
FUZZ_SEED = int(os.environ.get("ATOLL_FUZZ_SEED", "20261123"))
SANITIZER_FLAGS = ("-O1", "-g", "-std=c++17", "-fsanitize=address,undefined",
                   "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-Wno-unknown-pragmas")
SANITIZER_ENV = dict(ASAN_OPTIONS="detect_leaks=1:abort_on_error=1",
                     UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
DRIVER = Path(__file__).with_name("image_cu_fuzz.cpp")
REGRESSIONS = Path(__file__).with_name("regressions")
# Each input the fuzzer found and the status the CU must give it at every stage, with why.
REGRESSION_STATUS = {
    # A valid 1024x1024 4:2:2 frame whose scan runs short. What failed was the sanitizer build, not
    # the datapath: GCC 12's UBSan miscompiled strip_sampling's `(cond ? 1u : 0u) << n` (the
    # index read from an unset stack slot), so the strip expected 2x2 chroma blocks the core never
    # wrote (hls/image/README.md, "Sanitizer builds").
    "strip_reads_past_core_output.jpg": Status.CORRUPT,
}


def sanitizer_driver() -> Path:
    # The image folder: image_cu.cpp and the C models of the RTL blackboxes it calls.
    return csim.compile_cached([csim.HLS_DIR / "image", DRIVER],
                               SANITIZER_FLAGS, csim.REPO_ROOT / "build" / "fuzz", "image_cu_fuzz")


def assert_no_sanitizer_report(result: subprocess.CompletedProcess, what: str) -> None:
    assert result.returncode == 0, f"{what} failed:\n{result.stderr[-6000:]}"
    assert "runtime error" not in result.stderr and "Sanitizer" not in result.stderr, result.stderr[-6000:]


def cpu_status(data: bytes) -> Status:
    try:
        cpu_backend.image(data, "decode")
    except PreprocessError as e:
        return e.status
    return Status.OK


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


def test_fuzz_regressions_replay_cleanly_under_asan():
    paths = sorted(REGRESSIONS.glob("*.jpg"))
    assert sorted(p.name for p in paths) == sorted(REGRESSION_STATUS)  # each committed input has its status
    result = subprocess.run([str(sanitizer_driver()), "replay", *map(str, paths)], capture_output=True,
                            text=True, env=dict(os.environ, **SANITIZER_ENV), timeout=300)
    assert_no_sanitizer_report(result, "replaying the regression inputs")
    lines = [line.split() for line in result.stdout.splitlines()]
    assert [(Path(name).name, int(stage)) for name, stage, *_ in lines] == [
        (p.name, stage) for p in paths for stage in range(4)]
    for name, stage, *words in lines:
        status = dict(zip(csim.IMAGE_STATUS_FIELDS, map(int, words)))
        expected = REGRESSION_STATUS[Path(name).name]
        assert Status(status["code"]) == expected, (name, stage, status)
    for p in paths:
        assert cpu_status(p.read_bytes()) == REGRESSION_STATUS[p.name], p.name  # the CPU backend agrees


@pytest.mark.slow
def test_image_cu_survives_fuzzing_under_asan(tmp_path):
    crash_file = tmp_path / "crash.jpg"
    result = subprocess.run([str(sanitizer_driver()), "100000000", str(FUZZ_SECONDS), str(FUZZ_SEED),
                             str(crash_file), *map(str, seed_files(tmp_path))],
                            capture_output=True, text=True, env=dict(os.environ, **SANITIZER_ENV),
                            timeout=FUZZ_SECONDS + 120)
    assert_no_sanitizer_report(result, f"fuzzing (input left in {crash_file})")
    counts = dict(zip(result.stdout.split()[::2], map(int, result.stdout.split()[1::2])))
    assert counts["iterations"] > 200
    assert counts["ok"] > 0 and counts["corrupt"] > 0 and counts["unsupported"] > 0
