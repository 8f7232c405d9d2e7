"""Kernels compiled ahead: the cache is keyed by source and architecture, nvcc fills it (where
installed), and the cupy executor loads a cached cubin without NVRTC, its marker kernels' too (CuPy
stood in for, so this runs without a GPU), and falls back to NVRTC for what the cache lacks."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from gpu_runtime.executors import cupy_executor
from gpu_runtime.executors.cupy_executor import CupyExecutor
from gpu_runtime.kernels import cubins, markers
from gpu_runtime.kernels.elementwise import ewise, fill
from gpu_runtime.kernels.emulator import EmulatedKernel
from gpu_runtime.kernels.rows import rows_kernel
from gpu_runtime.kernels.se import se

NVCC = shutil.which("nvcc")


class FakeCupy:
    """What CupyExecutor.compile touches, recording how each kernel was obtained."""

    def __init__(self, capability: str):
        self.calls: list[tuple[str, str]] = []
        self.cuda = SimpleNamespace(Device=lambda: SimpleNamespace(compute_capability=capability))

    def RawModule(self, *, path):
        self.calls.append(("cubin", path))
        return SimpleNamespace(get_function=lambda name: ("function", path, name))

    def RawKernel(self, source, name, options):
        self.calls.append(("nvrtc", name))
        return SimpleNamespace(compile=lambda: None)


def _executor(capability: str) -> tuple[CupyExecutor, FakeCupy]:
    ex = object.__new__(CupyExecutor)  # no GPU here: only the compile path is exercised
    ex._cp, ex._kernels = FakeCupy(capability), {}
    return ex, ex._cp


def test_the_key_follows_source_and_architecture(tmp_path):
    k = fill()
    assert cubins.cubin_path(k, "90", tmp_path) == cubins.cubin_path(k, "sm_90", tmp_path)
    assert cubins.cubin_path(k, "90", tmp_path).parent.name == "sm_90"
    assert cubins.cubin_path(k, "80", tmp_path).name != cubins.cubin_path(k, "90", tmp_path).name
    assert cubins.cubin_path(k, "90", tmp_path) != cubins.cubin_path(fill("float16"), "90", tmp_path)
    with pytest.raises(ValueError, match="not a GPU architecture"):
        cubins.arch_of("hopper")


def _stand_in_cubin(kernel, root, monkeypatch):
    """A file where the cache keeps `kernel`'s sm_90 cubin (the executor only passes its path)."""
    monkeypatch.setattr(cubins, "CACHE", root)
    path = cubins.cubin_path(kernel, "90")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF stand-in")
    return path


def test_a_cached_cubin_is_loaded_and_nvrtc_never_called(tmp_path, monkeypatch):
    kernel = fill()
    path = _stand_in_cubin(kernel, tmp_path, monkeypatch)
    ex, cp = _executor("90")
    assert ex.compile(kernel) == ("function", str(path), kernel.name)
    assert ex.compile(kernel) == ("function", str(path), kernel.name)  # once per process
    assert cp.calls == [("cubin", str(path))]


def test_nvrtc_compiles_what_the_cache_lacks(tmp_path, monkeypatch):
    kernel = fill()
    _stand_in_cubin(kernel, tmp_path, monkeypatch)
    ex, cp = _executor("86")  # an architecture nothing was built for
    ex.compile(kernel)
    ex.compile(fill("float16"))
    assert cp.calls == [("nvrtc", kernel.name), ("nvrtc", fill("float16").name)]


def test_the_executor_loads_its_marker_kernels_from_the_cache(tmp_path, monkeypatch):
    paths = [_stand_in_cubin(k, tmp_path, monkeypatch) for k in (markers.PROGRESS, markers.STAMP)]
    cp = FakeCupy("90")
    monkeypatch.setattr(cupy_executor, "_cupy", lambda: cp)
    ex = CupyExecutor()
    assert cp.calls == [("cubin", str(p)) for p in paths]
    assert ex.compile(markers.STAMP) == ("function", str(paths[1]), "atoll_stamp")  # loaded once
    assert len(cp.calls) == 2


def test_nvrtc_compiles_the_marker_kernels_the_cache_lacks(tmp_path, monkeypatch):
    monkeypatch.setattr(cubins, "CACHE", tmp_path)
    cp = FakeCupy("90")
    monkeypatch.setattr(cupy_executor, "_cupy", lambda: cp)
    CupyExecutor()
    assert cp.calls == [("nvrtc", "atoll_progress"), ("nvrtc", "atoll_stamp")]


def test_the_marker_kernels_do_what_their_numpy_references_do():
    """Their CUDA source on the emulator: progress stores its value only while the flag is clear."""
    for flag in (0, 1):
        words = [np.zeros(1, np.int32) for _ in range(2)]
        EmulatedKernel(markers.PROGRESS).launch((1,), (1,), (np.array([flag], np.int32), words[0], 7))
        markers.PROGRESS.numpy_impl(np.array([flag], np.int32), words[1], 7)
        assert words[0][0] == words[1][0] == (0 if flag else 7)
    word = np.zeros(1, np.int32)
    EmulatedKernel(markers.STAMP).launch((1,), (1,), (word,))
    assert word[0] == 1


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_nvcc_fills_the_cache_the_executor_reads(tmp_path, monkeypatch):
    kernels = [fill(), ewise("add", "relu", 2, (False,) * 3, "ccc", ("float16",) * 3),
               rows_kernel("layernorm", "block", 0, ("float32",) * 3),
               se("relu", "hardsigmoid", ("float32", "float16", "float16")),
               markers.PROGRESS, markers.STAMP]
    reports = cubins.build(kernels, ["80", "90"], NVCC, jobs=2, root=tmp_path)
    assert [(r.name, r.arch) for r in reports] == [(k.name, a) for a in ("80", "90") for k in kernels]
    assert all(r.ok and r.spills == 0 and 0 < r.registers <= 255 for r in reports), reports
    for k in kernels:
        for arch in ("80", "90"):
            assert cubins.cached(k, arch, tmp_path).read_bytes()[:4] == b"\x7fELF"
    # cached: the reports come back without nvcc
    assert cubins.build(kernels, ["90"], "/nonexistent/nvcc", root=tmp_path) == reports[len(kernels):]
    monkeypatch.setattr(cubins, "CACHE", tmp_path)
    ex, cp = _executor("90")
    for k in kernels:
        ex.compile(k)
    assert [c[0] for c in cp.calls] == ["cubin"] * len(kernels)
