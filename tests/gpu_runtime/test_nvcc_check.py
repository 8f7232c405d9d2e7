"""The CUDA sources compile for sm_90 with nvcc (where it is installed) and nothing spills:
MobileNetV3's fp16 program covers the tensor-core GEMM, the split-K sum, the depthwise window
kernel with squeeze-excitation sums, the SE kernel, row means and the fp32 output casts."""

from __future__ import annotations

import shutil

import pytest
from gpu_runtime.nvcc_check import check, zoo_kernels


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_mobilenet_fp16_kernels_compile_for_sm90_without_spills():
    reports = check(zoo_kernels(["mobilenet_v3_small"], [1], ["fp16"]), "sm_90")
    assert len(reports) > 10
    assert all(r.ok for r in reports), [r.log for r in reports if not r.ok]
    assert not [r.name for r in reports if r.spill_stores or r.spill_loads]
    assert max(r.registers for r in reports) <= 255
