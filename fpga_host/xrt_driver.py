"""The pyxrt backend of the DPU driver (`XrtPort`), also run on `fpga_host.emu_xrt`, which offers
the same names. It calls only what pyxrt binds (XRT 2.20 / 2025.2, src/python/pybind11/src/pyxrt.cpp;
tests/fpga_host/test_pyxrt_surface.py holds the table): no `run.abort` (not bound), and no
`run.wait2(timeout)` (its std::chrono argument and std::cv_status result have no pybind11 caster
there), so a command's end is polled with `run.state()`, which is non-blocking and updates lazily
scheduled commands itself. Scalars go to `run.set_arg(int, int)`, bound for a C `int`: u32
arguments are passed as the signed 32-bit value with the same bits.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fpga_host import csim, emu_xrt
from fpga_host.dpu_driver import BackendUnavailable, CuFailure, DpuDriver, Ended
from fpga_host.manifest import DEFAULT_MANIFEST, Manifest, load_manifest
from fpga_host.status import reason_of

__all__ = ["BackendUnavailable", "CuFailure", "XrtPort", "open_emu", "open_xrt", "probe_emu", "probe_xrt"]

# A command has ended once in one of these; pyxrt binds no name for ERT_CMD_STATE_RUNNING (3), so
# "still going" is everything else (NEW, QUEUED, SUBMITTED and the unnamed RUNNING).
ENDED = ("ERT_CMD_STATE_COMPLETED", "ERT_CMD_STATE_ERROR", "ERT_CMD_STATE_ABORT", "ERT_CMD_STATE_TIMEOUT",
         "ERT_CMD_STATE_NORESPONSE", "ERT_CMD_STATE_SKERROR", "ERT_CMD_STATE_SKCRASHED")


def c_int(value: int) -> int:
    """A u32 argument as the C `int` pyxrt's scalar `set_arg` takes (same 32 bits)."""
    if not 0 <= value < 1 << 32:
        raise ValueError(f"scalar argument {value} does not fit 32 bits")
    return value - (1 << 32) if value >= 1 << 31 else value


class XrtPort:
    """pyxrt's device, kernel, bo and run under the DPU driver (`xrt` is pyxrt or emu_xrt)."""

    def __init__(self, xrt, device, xclbin_path: str | os.PathLike, on_close=None):
        self.xrt, self.device, self._on_close = xrt, device, on_close
        # register_xclbin + hw_context: what XRT 2.20 binds and 2.26 keeps (load_xclbin and
        # kernel(device, uuid, name) are deprecated shims there).
        self.context = xrt.hw_context(device, device.register_xclbin(xrt.xclbin(str(xclbin_path))))
        self._ended = {getattr(xrt.ert_cmd_state, name) for name in ENDED}
        self._completed = xrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED
        sync = xrt.xclBOSyncDirection
        self._to_device, self._from_device = sync.XCL_BO_SYNC_BO_TO_DEVICE, sync.XCL_BO_SYNC_BO_FROM_DEVICE

    def open_cu(self, kernel: str, cu: str):
        return self.xrt.kernel(self.context, f"{kernel}:{{{cu}}}")

    def buffer(self, cu, arg_index: int, size: int):
        return self.xrt.bo(self.device, size, self.xrt.bo.flags.normal, cu.group_id(arg_index))

    def size(self, buf) -> int:
        return buf.size()

    def write(self, buf, data: np.ndarray) -> None:
        buf.write(data, 0)
        buf.sync(self._to_device, max(data.size, 1), 0)

    def read(self, buf, nbytes: int) -> np.ndarray:
        buf.sync(self._from_device, nbytes, 0)
        return np.frombuffer(buf.map(), dtype=np.uint8, count=nbytes)

    def start(self, cu, args: list):
        run = self.xrt.run(cu)
        for i, value in enumerate(args):
            run.set_arg(i, value if isinstance(value, self.xrt.bo) else c_int(value))
        run.start()
        return run

    def ended(self, run) -> Ended | None:
        state = run.state()
        if state not in self._ended:
            return None
        return Ended(state == self._completed, state.name)

    def cycles(self, run) -> int | None:
        return emu_xrt.cycles(run) if self.xrt is emu_xrt else None  # a card's own: not reported by pyxrt

    def close(self) -> None:
        if self._on_close is not None:  # the emulation's worker threads; XRT has none to stop
            self._on_close()


def _open(xrt, xclbin_path, spec: Manifest, backend: str, device_index: int, options: dict) -> DpuDriver:
    try:
        device = xrt.device(device_index)
        on_close = (lambda: emu_xrt.release(device)) if xrt is emu_xrt else None
        return DpuDriver(XrtPort(xrt, device, xclbin_path, on_close), spec, backend=backend, **options)
    except (OSError, RuntimeError, AttributeError) as exc:
        raise BackendUnavailable(f"backend {backend!r} unavailable: {type(exc).__name__}: {exc}") from exc


def open_xrt(*, manifest: str | os.PathLike | None = None, device_index: int = 0, **options) -> DpuDriver:
    """The DPU on real XRT: the xclbin the manifest names, on device `device_index`."""
    spec = load_manifest(manifest or DEFAULT_MANIFEST)
    try:
        import pyxrt  # optional: only machines with XRT installed have it
    except ImportError as exc:
        raise BackendUnavailable(f"backend 'xrt' unavailable: {type(exc).__name__}: {exc}") from exc
    return _open(pyxrt, spec.path.parent / spec.xclbin, spec, "xrt", device_index, options)


def open_emu(*, manifest: str | os.PathLike | None = None, device_index: int = 0, **options) -> DpuDriver:
    """The DPU's functional model: the C-simulation library behind the emulated pyxrt."""
    spec = load_manifest(manifest or DEFAULT_MANIFEST)
    return _open(emu_xrt, spec.path, spec, "emu", device_index, options)


def probe_xrt(manifest: Path) -> dict:
    """Never raises: the XRT devices present and whether the built xclbin is there."""
    try:
        import pyxrt  # optional, as in open_xrt
    except Exception as exc:  # absent or broken install: both mean "no XRT here"
        return {"available": False, "reason": f"pyxrt not importable ({reason_of(exc)})"}
    devices = []
    try:
        while True:  # pyxrt has no device count; indices are dense from 0
            dev = pyxrt.device(len(devices))
            devices.append(str(dev.get_info(pyxrt.xrt_info_device.name)))
    except Exception:
        pass
    if not devices:
        return {"available": False, "reason": "pyxrt imported but no device was found"}
    try:
        xclbin = manifest.parent / load_manifest(manifest).xclbin
    except Exception:
        xclbin = None
    if xclbin is None or not xclbin.is_file():
        return {"available": False, "devices": devices,
                "reason": f"no built xclbin next to {manifest} (run `make -C hls`)"}
    return {"available": True, "devices": devices, "xclbin": str(xclbin)}


def probe_emu(manifest: Path) -> dict:
    """Never raises: whether the C-simulation library builds, and which kernels it holds."""
    try:
        kernels = load_manifest(manifest).kernels
        lib = csim.load_library()
    except Exception as exc:  # missing sources, compiler errors, bad manifest: all "unavailable"
        return {"available": False, "reason": reason_of(exc)}
    # A library built before some kernels' sources existed serves those requests on the CPU path.
    present = {name: hasattr(lib, name) for name in kernels}
    return {"available": any(present.values()), "library": str(getattr(lib, "_name", lib)),
            "manifest": str(manifest), "kernels": present}
