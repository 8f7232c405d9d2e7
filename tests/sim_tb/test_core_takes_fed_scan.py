"""The decode core's RTL (hls/rtl/jpeg_decode_core.v, Icarus) on the scan beats the kernel's feeder
(hls/image/jpeg_scan_feed.h) sends it: beats that follow the file's 8-byte groups, so the first
and last may be short, and, for a file that ends where its scan starts, one beat of count 0 marked
last. Every block and status must equal the core's C model on the same beats, and no scan may hang
the harness."""

from __future__ import annotations

import ctypes

import numpy as np

from fpga_host import csim
from sim_tb.jpeg_entropy_decode import entropy_sim, scan_files

DRIVER = csim.REPO_ROOT / "tests" / "sim_tb" / "scan_feed_beats.cpp"


def driver() -> ctypes.CDLL:
    path = csim.compile_cached([csim.HLS_DIR / "image", DRIVER], csim.CXXFLAGS,
                               csim.REPO_ROOT / "build" / "scan_feed", "libscan_feed.so")
    lib = ctypes.CDLL(str(path))
    lib.scan_feed_beats.restype = lib.scan_feed_core.restype = ctypes.c_uint32
    return lib


def feeder(lib: ctypes.CDLL):
    """feed_scan's beats for a file, as entropy_sim.scan_beats gives them to the harness."""

    def beats(jpeg: bytes, start: int) -> list[int]:
        n = len(jpeg) // 8 + 2
        lo, hi = np.zeros(n, np.uint64), np.zeros(n, np.uint32)
        got = lib.scan_feed_beats(jpeg, ctypes.c_uint32(len(jpeg)), ctypes.c_uint32(start),
                                  lo.ctypes.data_as(ctypes.c_void_p), hi.ctypes.data_as(ctypes.c_void_p),
                                  ctypes.c_uint32(n))
        return [int(lo[i]) | int(hi[i] & 0xFF) << 64 | int(hi[i] >> 8) << 72 for i in range(got)]

    return beats


def core_model(lib: ctypes.CDLL, jpeg: bytes, scan: entropy_sim.Scan) -> tuple[int, np.ndarray]:
    """The core's C model on feed_scan's beats: status and sample blocks (n, 64)."""
    max_rows = 8 * max(scan.n_mcus * scan.blocks_per_mcu, 1)
    rows, n = np.zeros((max_rows, 8), np.uint8), ctypes.c_uint32()
    status = lib.scan_feed_core(jpeg, ctypes.c_uint32(len(jpeg)), rows.ctypes.data_as(ctypes.c_void_p),
                                ctypes.c_uint32(max_rows), ctypes.byref(n))
    return status, rows[:n.value // 8 * 8].reshape(-1, 64)


def test_core_decodes_the_feeders_beats(tmp_path, monkeypatch):
    files = scan_files.files()
    base = files["cv2-420-q90-48x64"]
    start = entropy_sim.reference_scan(base).scan_start
    picked = {name: files[name] for name in ("cv2-420-q90-48x64", "cv2-444-q75-33x31", "cv2-gray-rst4-45x61",
                                             "truncated", "cv2-444-1x1")}
    picked |= {"empty-scan": base[:start], "three-scan-bytes": base[:start + 3],
               "shifted-by-3": base[:2] + b"\xff\xfe\x00\x05" + bytes(3) + base[2:]}
    lib = driver()
    beats = feeder(lib)
    monkeypatch.setattr(entropy_sim, "scan_beats", beats)
    jobs, expected = [], {"names": np.array(list(picked))}
    for i, (name, jpeg) in enumerate(picked.items()):
        scan = entropy_sim.reference_scan(jpeg)
        assert scan.status == 0, name
        if name != "cv2-420-q90-48x64":  # the feeder's beats start inside a group here
            assert scan.scan_start % 8 != 0 or name == "empty-scan", name
        status, blocks = core_model(lib, jpeg, scan)
        expected |= {f"status{i}": status, f"blocks{i}": blocks}
        jobs.append((jpeg, scan))
    assert beats(picked["empty-scan"], start) == [1 << 72]  # count 0, last
    params = entropy_sim.harness_sizes(jobs) | {"CYCLE_LIMIT": 64 * max(len(j) for j, _ in jobs) + 20000}
    results = entropy_sim.run_jobs(jobs, tmp_path, "icarus", core=True, params=params)
    matched = entropy_sim.matched_scans(expected, results, entropy_sim.sample_blocks, padded=True)
    statuses = {name: got.status for name, got, _ in matched}
    assert statuses["empty-scan"] == statuses["three-scan-bytes"] == statuses["truncated"] == entropy_sim.CORRUPT
    assert statuses["cv2-420-q90-48x64"] == statuses["shifted-by-3"] == 0
