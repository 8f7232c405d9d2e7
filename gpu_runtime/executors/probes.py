"""What each executor can use on this machine, for `atoll info` and `auto`: `probe_<name>()`
returns {"version": ..., ...} or raises with the reason the backend cannot run here."""

from __future__ import annotations

import shutil

import numpy
import onnxruntime

from gpu_runtime.executors.rt_launcher import NativeBuildError, RtLauncher
from gpu_runtime.kernels.emulator import CXX


def probe_numpy() -> dict:
    return {"version": numpy.__version__}


def probe_onnxruntime() -> dict:
    return {"version": onnxruntime.__version__, "providers": onnxruntime.get_available_providers()}


def probe_cuda_emu() -> dict:
    if shutil.which(CXX) is None:
        raise RuntimeError(f"no C++ compiler ({CXX}) to build the emulated kernels")
    return {"version": "g++ (CUDA C sources on CPU fibers)"}


def probe_cupy() -> dict:
    import cupy  # optional: CuPy, GPU only

    devices = cupy.cuda.runtime.getDeviceCount()  # raises without a driver
    if devices < 1:
        raise RuntimeError("CUDA driver present but no device")

    try:
        RtLauncher()
        launcher = "native"
    except (NativeBuildError, OSError) as exc:  # RT tasks are then launched from Python
        launcher = f"python ({exc})"
    return {
        "version": cupy.__version__,
        "devices": devices,
        "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
        "rt_launcher": launcher,
    }
