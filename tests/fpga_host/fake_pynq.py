"""A pynq-shaped module over the emulated XRT, for testing the pynq backend without pynq or a card.

It offers what fpga_host.pynq_driver uses of pynq 3.x, with pynq's shapes: `Device.devices`,
`Overlay(xclbin, device=)` with a CU attribute per CU (`args`, `start`) and a bank attribute per
memory, `allocate(shape, dtype, target=)` returning an ndarray with `sync_to_device`,
`sync_from_device` and `device_address`, and wait handles whose `wait()` returns however the
command ended and whose `done` changes only while some thread is in `wait()` (as pynq's
ErtWaitHandle). The "xclbin" is the manifest JSON beside the path the driver names.
"""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path

import numpy as np

from fpga_host import emu_xrt
from fpga_host.manifest import load_manifest
from fpga_host.xrt_driver import c_int

__version__ = "3.0.1-emulated"
XrtArgument = collections.namedtuple("XrtArgument", ["name", "index", "type", "mem"])
BANK = "HBM[0]"  # one flat host memory stands in for every bank
HANG_CUS: set[str] = set()  # CUs of the next Overlay that complete nothing while listed


class _Device:
    name = "atoll-emulated-dpu"


class Device:
    devices = [_Device()]


class PynqBuffer(np.ndarray):
    def sync_to_device(self) -> None:
        self.bo.sync(emu_xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE, self.nbytes, 0)

    def sync_from_device(self) -> None:
        self.bo.sync(emu_xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE, self.nbytes, 0)

    @property
    def device_address(self) -> int:
        return self.bo.address()


class _Bank:
    def __init__(self, device):
        self.device = device


def allocate(shape, dtype="u4", target=None) -> PynqBuffer:
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    bo = emu_xrt.bo(target.device, nbytes, emu_xrt.bo.flags.normal, 0)
    buf = np.frombuffer(bo.map(), dtype=dtype).reshape(shape).view(PynqBuffer)
    buf.bo = bo
    return buf


class _Events:
    """pynq's XrtDevice._handle_events: one pass marks every ended command's handle done."""

    ENDED = {s for s in emu_xrt.ert_cmd_state if s.value >= emu_xrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED}

    def __init__(self):
        self.active: list[_WaitHandle] = []
        self.lock = threading.Lock()

    def handle(self) -> None:
        with self.lock:
            for h in self.active:
                h._done = h._done or h._run.state() in self.ENDED
            self.active = [h for h in self.active if not h._done]
        time.sleep(0.001)


class _WaitHandle:
    def __init__(self, run, events: _Events):
        self._run, self._events, self._done = run, events, False
        with events.lock:
            events.active.append(self)

    @property
    def done(self) -> bool:
        return self._done

    def wait(self) -> None:  # returns however the command ended, as pynq's does
        while not self._done:
            self._events.handle()


class _IP:
    def __init__(self, kernel, spec, events: _Events):
        self._kernel, self._events = kernel, events
        self.args = {a.name: XrtArgument(a.name, i + 1, "unsigned int" if a.kind == "u32" else "void*", BANK)
                     for i, a in enumerate(spec.args)}

    def start(self, *args) -> _WaitHandle:
        run = emu_xrt.run(self._kernel)
        for i, value in enumerate(args):
            if not isinstance(value, PynqBuffer) and not 0 <= value < 1 << 32:
                raise ValueError(f"argument {i}: {value} is not an unsigned int")  # pynq's struct.pack
            run.set_arg(i, value.bo if isinstance(value, PynqBuffer) else c_int(value))
        run.start()
        return _WaitHandle(run, self._events)


class Overlay:
    def __init__(self, xclbin: str, device=None):
        self._device = emu_xrt.device(0)
        events = _Events()
        emu_xrt.hang(self._device, HANG_CUS)
        xb = emu_xrt.xclbin(str(Path(xclbin).with_suffix(".json")))
        uuid = self._device.load_xclbin(xb)
        setattr(self, BANK.replace("[", "").replace("]", ""), _Bank(self._device))
        for spec in load_manifest(Path(xclbin).with_suffix(".json")).kernels.values():
            for cu in spec.cus:
                try:
                    setattr(self, cu, _IP(emu_xrt.kernel(self._device, uuid, f"{spec.name}:{{{cu}}}"), spec, events))
                except RuntimeError:  # a kernel the C-simulation library lacks has no IP here
                    pass

    def free(self) -> None:
        emu_xrt.release(self._device)
