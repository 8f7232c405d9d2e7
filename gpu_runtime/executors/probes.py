"""What each executor can use on this machine, for `atoll info` and `auto`: `probe_<name>()`
returns {"version": ..., ...} or raises with the reason the backend cannot run here."""

from __future__ import annotations

import importlib.metadata
import re
import shutil

import numpy
import onnxruntime

from gpu_runtime.executors.rt_launcher import NativeBuildError, RtLauncher
from gpu_runtime.kernels.emulator import CXX

# CuPy's wheels per CUDA major, and the extra of atoll's that installs each (pyproject.toml).
CUPY_WHEELS = {"cupy-cuda12x": ("gpu", 12), "cupy-cuda13x": ("gpu-cuda13", 13)}


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
        "cuda_driver": cupy.cuda.runtime.driverGetVersion(),
        "rt_launcher": launcher,
        **cupy_stack(),
    }


def cupy_stack(distributions=importlib.metadata.distributions) -> dict:
    """Which CuPy wheel is installed and why it is the one in use, from package metadata (CuPy is
    not imported, so this answers where CUDA does not work): {"package", "why"}."""
    found = {}
    for dist in distributions():
        name = (dist.metadata["Name"] or "").lower()
        if re.fullmatch(r"cupy(-cuda\w+)?", name):
            found[name] = dist.version
    choices = " or ".join(f"pip install 'atoll[{extra}]' (CUDA {major} driver)"
                          for extra, major in CUPY_WHEELS.values())
    if not found:
        return {"package": None, "why": f"no CuPy installed: {choices}"}
    if len(found) > 1:
        names = ", ".join(f"{n} {v}" for n, v in sorted(found.items()))
        return {"package": names, "why": f"{names} are all installed and share the `cupy` module (the last "
                                         f"installed wins): uninstall all but one"}
    (name, version), = found.items()
    extra, major = CUPY_WHEELS.get(name, (None, None))
    why = (f"the `{extra}` extra's wheel, built for CUDA {major}: it needs a driver for CUDA {major} or newer"
           if extra else "not a wheel of atoll's extras (a source build or another CUDA major): used as found")
    return {"package": f"{name} {version}", "why": why}
