"""Shared pytest setup: GPU tests skip (never fail) where no CUDA device answers, and under
pytest-xdist the costliest files start first."""

from __future__ import annotations

import functools

import pytest

# The files that cost most, costliest first (`pytest -n 2 --dist loadfile`, per-file sums on the
# 2-core VM; test_rtl_synthesis.py as on a clean machine, its Yosys runs uncached). loadfile hands
# each worker a whole file at a time, in collection order: started first, a long file cannot be
# the last one running while the other worker sits idle. A file not listed only loses its head
# start; a new slow file earns a line here.
COSTLIEST_FILES = [
    "tests/atoll/cluster/test_cluster_stop.py",
    "tests/sim_tb/test_rtl_operators.py",
    "tests/sim_tb/test_rtl_synthesis.py",
    "tests/gpu_runtime/test_cuda_emulator_kernels.py",
    "tests/atoll/cluster/test_ray_runtime.py",
    "tests/atoll/bench/test_bench_serve.py",
    "tests/atoll/test_server_e2e.py",
    "tests/sim_tb/test_rtl_units.py",
    "tests/sim_tb/test_rtl_jpeg.py",
    "tests/tools/test_gpu_acceptance_script.py",
    "tests/atoll/cluster/test_endpoint.py",
    "tests/fpga_host/test_image_fuzz.py",
    "tests/gpu_runtime/test_block_bounds.py",
    "tests/atoll/supervisor/test_rt_admission.py",
    "tests/gpu_runtime/test_worker_pool.py",
    "tests/atoll/test_sequences.py",
    "tests/atoll/test_robust_serving.py",
    "tests/atoll/bench/test_bench_cluster.py",
    "tests/scheduler/test_vgpu_engine.py",
    "tests/fpga_host/test_audio_mel_cu.py",
    "tests/fpga_host/test_audio_norm_cu.py",
]


@functools.cache
def cuda_available() -> bool:
    try:
        import cupy  # optional: CuPy, GPU only

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no cupy, no driver, or no device: all mean "no GPU here"
        return False


def pytest_configure(config):
    # xdist would otherwise order the files by their number of tests, over the order given below.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(COSTLIEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device (cupy absent or no driver)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
