"""The pynq backend of the DPU driver (`PynqPort`): the same CU pool, timeouts and CPU fallback as
the XRT backend, over pynq 3.x's `Overlay` (each CU and memory bank an attribute), `allocate` (a
buffer in the bank a CU argument reaches) and `ip.start` (a wait handle); docs/hardware.md has the
API facts this relies on and why pynq 4 does not fit.

pynq's `wait()` takes no timeout, and a handle's `done` changes only while some thread is in `wait()`.
So one pump thread per overlay waits on the pending handles in turn and the driver polls `done`
against its own deadline; a hung command keeps the pump in its `wait()`, where the others still
complete. A failed command leaves the status word the driver set before starting it, so the driver
retires that CU.
"""

from __future__ import annotations

import os
import queue
import re
import threading
from pathlib import Path

import numpy as np

from fpga_host.dpu_driver import BackendUnavailable, DpuDriver, Ended
from fpga_host.manifest import DEFAULT_MANIFEST, load_manifest
from fpga_host.status import reason_of


class PynqPort:
    def __init__(self, pynq, overlay):
        self.pynq, self.overlay = pynq, overlay
        self._pending: queue.Queue = queue.Queue()
        self._start_lock = threading.Lock()  # pynq's device keeps its pending commands in a list
        self._pump = threading.Thread(target=self._wait_all, name="pynq-pump", daemon=True)
        self._pump.start()

    def _wait_all(self) -> None:
        while (handle := self._pending.get()) is not None:
            handle.wait()

    def open_cu(self, kernel: str, cu: str):
        ip = getattr(self.overlay, cu, None)
        if ip is None:
            raise RuntimeError(f"the overlay has no CU {cu} of {kernel}")
        return ip

    def buffer(self, cu, arg_index: int, size: int):
        bank = list(cu.args.values())[arg_index].mem
        target = getattr(self.overlay, re.sub("[^A-Za-z0-9_]", "", bank))
        return self.pynq.allocate((size,), np.uint8, target=target)

    def size(self, buf) -> int:
        return buf.nbytes

    def write(self, buf, data: np.ndarray) -> None:
        buf[: data.size] = data
        buf.sync_to_device()

    def read(self, buf, nbytes: int) -> np.ndarray:
        buf.sync_from_device()
        return np.asarray(buf)[:nbytes]

    def start(self, cu, args: list):
        with self._start_lock:
            handle = cu.start(*args)
        self._pending.put(handle)
        return handle

    def ended(self, handle) -> Ended | None:
        return Ended(True, "done") if handle.done else None

    def cycles(self, handle) -> None:
        return None

    def close(self) -> None:
        self._pending.put(None)
        self.overlay.free()


def open_pynq(*, manifest: str | os.PathLike | None = None, device_index: int = 0, **options) -> DpuDriver:
    """The DPU through pynq: the xclbin the manifest names, on pynq's device `device_index`."""
    spec = load_manifest(manifest or DEFAULT_MANIFEST)
    try:
        import pynq  # optional: the `fpga` extra, not installed by default
    except ImportError as exc:
        raise BackendUnavailable(f"backend 'pynq' unavailable: {reason_of(exc)}") from exc
    try:
        device = pynq.Device.devices[device_index]
        overlay = pynq.Overlay(str(spec.path.parent / spec.xclbin), device=device)
        return DpuDriver(PynqPort(pynq, overlay), spec, backend="pynq", **options)
    except (IndexError, OSError, RuntimeError, AttributeError) as exc:
        raise BackendUnavailable(f"backend 'pynq' unavailable: {reason_of(exc)}") from exc


def probe_pynq(manifest: Path) -> dict:
    """Never raises: pynq's XRT devices and whether the built xclbin is there."""
    try:
        import pynq  # optional, as in open_pynq
        devices = [str(d.name) for d in pynq.Device.devices]
    except Exception as exc:  # absent, or pynq without a usable device layer
        return {"available": False, "reason": f"pynq not usable ({reason_of(exc)})"}
    if not devices:
        return {"available": False, "reason": "pynq imported but found no device"}
    try:
        xclbin = manifest.parent / load_manifest(manifest).xclbin
    except Exception as exc:
        return {"available": False, "devices": devices, "reason": reason_of(exc)}
    if not xclbin.is_file():
        return {"available": False, "devices": devices,
                "reason": f"no built xclbin next to {manifest} (run `make -C hls`)"}
    return {"available": True, "devices": devices, "xclbin": str(xclbin), "version": getattr(pynq, "__version__", "?")}
