"""The CUDA sources compile for sm_80 and sm_90 with nvcc (where it is installed) and nothing
spills: MobileNetV3's fp16 program covers the tensor-core GEMM, the split-K sum, the depthwise
window kernel with squeeze-excitation sums, the SE kernel, row means and the fp32 output casts.
The cubins land in a cache of the test's own."""

from __future__ import annotations

import shutil

import pytest

from gpu_runtime import nvcc_check
from gpu_runtime.kernels import cubins


def test_the_batcher_shapes_are_every_built_batch_size_and_audio_bucket():
    assert nvcc_check.BATCHES == (1, 2, 4, 8, 16, 32)
    assert nvcc_check.AUDIO_FRAMES[0] == 251 and nvcc_check.AUDIO_FRAMES[-1] == 3001
    keys = [k for k, _ in nvcc_check.zoo_programs(["citrinet"], [1, 2], ["fp16"], (251, 501))]
    assert keys == ["citrinet/b1/t251/fp16", "citrinet/b1/t501/fp16", "citrinet/b2/t251/fp16",
                    "citrinet/b2/t501/fp16"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_mobilenet_fp16_kernels_compile_for_sm80_and_sm90_without_spills(tmp_path, monkeypatch):
    monkeypatch.setattr(cubins, "CACHE", tmp_path)
    kernels = nvcc_check.zoo_kernels(["mobilenet_v3_small"], [1], ["fp16"])
    reports = nvcc_check.check(kernels, ["80", "90"], jobs=2)
    assert len(reports) == 2 * len(kernels) > 20
    assert all(r.ok for r in reports), [r.log for r in reports if not r.ok]
    assert not [r.name for r in reports if r.spills]
    assert max(r.registers for r in reports) <= 255
    assert all(cubins.cached(k, a) for k in kernels.values() for a in ("80", "90"))
