"""fpga_host.csim: the C-simulation build is cached by content, rebuilt on change, safe to run
concurrently, and reports compiler errors verbatim."""

import ctypes
import threading

import pytest

from fpga_host import csim
from fpga_host.dpu_driver import scratch_bytes

FLAGS = ("-O0", "-shared", "-fPIC", "-std=c++17")


def write_unit(tmp_path, body: str):
    src = tmp_path / "unit"
    src.mkdir(exist_ok=True)
    (src / "unit.cpp").write_text(body)
    return src


def test_library_exports_the_image_kernel():
    lib = csim.load_library()
    assert csim.library_path().exists()
    assert csim.library_path().is_relative_to(csim.BUILD_ROOT)
    assert lib.image_cu_scratch_bytes(16) == 3 * 64 * 16  # rows of whole 64-byte beats

    assert all(lib.image_cu_scratch_bytes(d) == scratch_bytes(d) for d in (1, 16, 100, 8192))
    assert isinstance(lib.image_cu, ctypes._CFuncPtr)


def test_build_is_cached_and_rebuilt_when_sources_change(tmp_path):
    src = write_unit(tmp_path, 'extern "C" int answer() { return 41; }\n')
    first = csim.compile_cached([src], FLAGS, tmp_path / "out", "libunit.so")
    stamp = first.stat().st_mtime_ns
    assert csim.compile_cached([src], FLAGS, tmp_path / "out", "libunit.so") == first
    assert first.stat().st_mtime_ns == stamp  # not rebuilt
    write_unit(tmp_path, 'extern "C" int answer() { return 42; }\n')
    second = csim.compile_cached([src], FLAGS, tmp_path / "out", "libunit.so")
    assert second != first
    assert ctypes.CDLL(str(second)).answer() == 42


def test_compiler_errors_are_raised_verbatim(tmp_path):
    src = write_unit(tmp_path, "int broken( {\n")
    with pytest.raises(csim.CsimBuildError) as info:
        csim.compile_cached([src], FLAGS, tmp_path / "out", "libunit.so")
    assert "unit.cpp" in info.value.stderr and "error" in info.value.stderr
    assert not list((tmp_path / "out").rglob("*.so"))  # no half-written library left behind


def test_concurrent_builds_agree(tmp_path):
    src = write_unit(tmp_path, 'extern "C" int answer() { return 7; }\n')
    results, errors = [], []

    def build():
        try:
            results.append(csim.compile_cached([src], FLAGS, tmp_path / "out", "libunit.so"))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(results)) == 1
    assert ctypes.CDLL(str(results[0])).answer() == 7
    assert [p.name for p in results[0].parent.iterdir()] == ["libunit.so"]  # temporaries gone
