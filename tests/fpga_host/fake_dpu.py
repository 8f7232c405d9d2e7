"""The test-only fake DPU library (fake_dpu.c) compiled once per session, and drivers on top of it."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from fpga_host import emu_xrt
from fpga_host.manifest import DEFAULT_MANIFEST, load_manifest
from fpga_host.dpu_driver import DpuDriver
from fpga_host.xrt_driver import XrtPort

SOURCE = Path(__file__).with_name("fake_dpu.c")


@pytest.fixture(scope="session")
def fake_library(tmp_path_factory) -> ctypes.CDLL:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler for the fake DPU library")
    out = tmp_path_factory.mktemp("fake_dpu") / "libfake_dpu.so"
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(out), str(SOURCE), "-lm"],
                   check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(out))


@pytest.fixture
def use_fake_library(fake_library, monkeypatch):
    """Makes every emulated device (also those the Preprocessor opens) run the fake library."""
    monkeypatch.setattr(emu_xrt, "load_default_library", lambda: fake_library)
    return fake_library


def fake_device(library, hang=()) -> emu_xrt.device:
    device = emu_xrt.device(0)
    emu_xrt.use_library(device, library)
    emu_xrt.hang(device, hang)
    return device


def fake_driver(library, hang=(), **options) -> DpuDriver:
    device = fake_device(library, hang)
    manifest = load_manifest(DEFAULT_MANIFEST)
    port = XrtPort(emu_xrt, device, manifest.path, on_close=lambda: emu_xrt.release(device))
    return DpuDriver(port, manifest, backend="emu", **options)
