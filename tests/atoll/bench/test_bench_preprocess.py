"""`atoll bench preprocess` plumbing on the fake DPU library (no speed is asserted here)."""

from __future__ import annotations

from fpga_host.preprocessor import Preprocessor
from tests.fpga_host.fake_dpu import fake_library, use_fake_library  # noqa: F401 (fixtures)

from atoll.bench import preprocess as bench
from atoll.bench.corpus import jpeg_bytes


def test_measure_counts_every_request(use_fake_library):
    requests = [lambda pre, d=jpeg_bytes(64, 48, seed=i): pre.submit_image(d) for i in range(10)]
    with Preprocessor("emu", cpu_workers=0) as pre:
        row = bench.measure(pre, requests, "emu", unloaded=2)
    assert row["n"] == max(10, bench.MIN_PER_WORKER * pre.parallelism)  # every CU gets 8 or more
    assert row["cpu_fallbacks"] == 0 and row["throughput_per_s"] > 0
    assert row["latency_ms"]["p50"] <= row["latency_ms"]["p99"]


def test_mel_norm_overlap_runs_all_three_ways(use_fake_library):
    result = bench.mel_norm_overlap(bench.audio_clips(6), "emu")
    assert result["n"] == 6
    assert {"serial_fused_s", "pipelined_1mel_1norm_s", "pipelined_2mel_2norm_s",
            "pipelined_1mel_1norm_speedup", "pipelined_2mel_2norm_speedup"} <= result.keys()


def test_the_default_backends_run_anywhere_and_every_dpu_backend_is_a_configuration():
    assert bench.ANYWHERE == ("cpu", "emu")
    labels = [label for label, _ in bench.configurations("image", ["cpu", "emu", "xrt", "pynq"], cus=2)]
    assert labels[:1] == ["cpu-1"] and {"emu", "xrt", "pynq"} <= set(labels)
