"""Which preprocessing backends this machine can run, and which `auto` picks (xrt, else cpu).

`emu` runs the HLS C++ (written for hardware, not for a CPU) behind the emulated XRT: it is the
functional model of the DPU, slower than OpenCV/librosa on the same cores, so `auto` never serves
with it; it is chosen by asking for it (`--backend emu`), as Vitis users choose an emulation target.

`probe_backends()` never raises: every failure becomes an `available: False` entry with a reason,
because `atoll info` and the `auto` choice must work on any machine.
"""

from __future__ import annotations

import os
from pathlib import Path

from fpga_host.manifest import DEFAULT_MANIFEST, load_manifest


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip().splitlines()[0]


def probe_xrt(manifest: Path) -> dict:
    try:
        import pyxrt
    except Exception as exc:  # absent or broken install: both mean "no XRT here"
        return {"available": False, "reason": f"pyxrt not importable ({_reason(exc)})"}
    devices = []
    try:
        while True:  # pyxrt has no device count; indices are dense from 0
            dev = pyxrt.device(len(devices))
            devices.append(str(dev.get_info(pyxrt.xrt_info_device.name)))
    except Exception:
        pass
    if not devices:
        return {"available": False, "reason": "pyxrt imported but no device was found"}
    xclbin = _xclbin_path(manifest)
    if xclbin is None or not xclbin.is_file():
        return {"available": False, "devices": devices,
                "reason": f"no built xclbin next to {manifest} (run `make -C hls`)"}
    return {"available": True, "devices": devices, "xclbin": str(xclbin)}


def _xclbin_path(manifest: Path) -> Path | None:
    try:
        return manifest.parent / load_manifest(manifest).xclbin
    except Exception:
        return None


def probe_emu(manifest: Path) -> dict:
    try:
        from fpga_host import csim

        load_manifest(manifest)
        lib = csim.load_library()
    except Exception as exc:  # missing sources, compiler errors, bad manifest: all "unavailable"
        return {"available": False, "reason": _reason(exc)}
    # A library built before some kernels' sources existed serves those requests on the CPU path.
    kernels = {name: hasattr(lib, name) for name in load_manifest(manifest).kernels}
    return {"available": any(kernels.values()), "library": str(getattr(lib, "_name", lib)),
            "manifest": str(manifest), "kernels": kernels}


def probe_cpu() -> dict:
    try:
        import cv2
        import librosa
    except Exception as exc:
        return {"available": False, "reason": _reason(exc)}
    return {"available": True, "cores": os.cpu_count(), "opencv": cv2.__version__,
            "librosa": librosa.__version__}


def probe_backends(manifest: str | os.PathLike | None = None) -> dict:
    manifest = Path(manifest) if manifest else DEFAULT_MANIFEST
    try:
        backends = {"xrt": probe_xrt(manifest), "emu": probe_emu(manifest), "cpu": probe_cpu()}
    except Exception as exc:  # belt and braces: `atoll info` must still print something
        unavailable = {"available": False, "reason": _reason(exc)}
        backends = {"xrt": unavailable, "emu": unavailable, "cpu": probe_cpu()}
    chosen = "xrt" if backends["xrt"]["available"] else "cpu"
    return {"backend": chosen, "backends": backends}
