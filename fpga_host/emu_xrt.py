"""Emulated XRT: the subset of the `pyxrt` API that `fpga_host.xrt_driver` uses, run on the host.

Like XRT's software emulation, kernels execute the HLS C++ compiled for the host (the C-simulation
library, `fpga_host.csim`) through ctypes, which releases the GIL. Each CU has one worker thread that
runs its commands in order, so CUs of a device run concurrently and a CU never runs two commands at
once, as on the FPGA. An "xclbin" here is the manifest JSON; buffer objects are NumPy arrays.

Fault injection for tests: CUs named in `ATOLL_EMU_HANG_CUS` (comma-separated) when the device is
opened, or added to `device.hang_cus`, complete no command while they are listed there (or until
the device closes), so `run.wait(timeout)` times out.
"""

from __future__ import annotations

import ctypes
import enum
import os
import queue
import threading
import uuid as _uuid

import numpy as np

from fpga_host.manifest import KernelSpec, Manifest, load_manifest

_CTYPES = {"bo": ctypes.c_void_p, "u32": ctypes.c_uint32, "f32": ctypes.c_float}


class ert_cmd_state(enum.IntEnum):  # values as in XRT's ert.h
    ERT_CMD_STATE_NEW = 1
    ERT_CMD_STATE_QUEUED = 2
    ERT_CMD_STATE_RUNNING = 3
    ERT_CMD_STATE_COMPLETED = 4
    ERT_CMD_STATE_ERROR = 5
    ERT_CMD_STATE_ABORT = 6
    ERT_CMD_STATE_SUBMITTED = 7
    ERT_CMD_STATE_TIMEOUT = 8


class xclBOSyncDirection(enum.IntEnum):
    XCL_BO_SYNC_BO_TO_DEVICE = 0
    XCL_BO_SYNC_BO_FROM_DEVICE = 1


def load_default_library() -> ctypes.CDLL:
    """The C-simulation library of the DPU kernels (tests substitute their own)."""
    from fpga_host import csim

    return csim.load_library()


class uuid:
    def __init__(self, value: str):
        self.value = value

    def to_string(self) -> str:
        return self.value

    def __eq__(self, other) -> bool:
        return isinstance(other, uuid) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


class _xclbin_kernel:
    def __init__(self, spec: KernelSpec):
        self.spec = spec

    def get_name(self) -> str:
        return self.spec.name


class xclbin:
    """Reads the manifest JSON where real XRT reads the binary container."""

    def __init__(self, path: str | os.PathLike):
        self.manifest: Manifest = load_manifest(path)
        self._uuid = uuid(str(_uuid.uuid5(_uuid.NAMESPACE_URL, str(self.manifest.path.resolve()))))

    def get_uuid(self) -> uuid:
        return self._uuid

    def get_kernels(self) -> list[_xclbin_kernel]:
        return [_xclbin_kernel(k) for k in self.manifest.kernels.values()]


class _ComputeUnit:
    """One CU: a thread executing commands in submission order."""

    def __init__(self, device: "device", name: str, fn):
        self.device = device
        self.name = name
        self.fn = fn
        self.commands: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name=f"emu-{name}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            command = self.commands.get()
            if command is None:
                return
            command._execute(self)


class device:
    def __init__(self, index: int = 0, library: ctypes.CDLL | None = None):
        if index != 0:
            raise RuntimeError(f"emulated XRT has one device (index 0), not {index}")
        self.index = index
        self.library = library
        self.hang_cus: set[str] = {c for c in os.environ.get("ATOLL_EMU_HANG_CUS", "").split(",") if c}
        self.closed = threading.Event()  # releases hung commands so threads can exit
        self._xclbin: xclbin | None = None
        self._cus: dict[str, _ComputeUnit] = {}
        self._lock = threading.Lock()

    def get_info(self, _key=None) -> str:
        return "atoll-emulated-dpu"

    def load_xclbin(self, xb: xclbin) -> uuid:
        if self.library is None:
            self.library = load_default_library()
        for spec in xb.manifest.kernels.values():
            # A kernel whose sources are not in the library yet cannot be opened (kernel() says so),
            # like a CU missing from a partial bitstream; the others work.
            fn = getattr(self.library, spec.name, None)
            if fn is not None:
                fn.argtypes = [_CTYPES[a.kind] for a in spec.args]
                fn.restype = None
        self._xclbin = xb
        return xb.get_uuid()

    register_xclbin = load_xclbin

    def _cu(self, spec: KernelSpec, name: str) -> _ComputeUnit:
        with self._lock:
            if name not in self._cus:
                self._cus[name] = _ComputeUnit(self, name, getattr(self.library, spec.name))
            return self._cus[name]

    def close(self) -> None:
        self.closed.set()
        for cu in self._cus.values():
            cu.commands.put(None)


class kernel:
    class cu_access_mode(enum.IntEnum):
        exclusive = 0
        shared = 1

    exclusive = cu_access_mode.exclusive
    shared = cu_access_mode.shared

    def __init__(self, dev: device, xclbin_uuid: uuid, name: str, mode=cu_access_mode.shared):
        if dev._xclbin is None or dev._xclbin.get_uuid() != xclbin_uuid:
            raise RuntimeError("xclbin not loaded on this device")
        kernel_name, _, cu_part = name.partition(":")
        self.spec = dev._xclbin.manifest.kernel(kernel_name)
        if getattr(dev.library, kernel_name, None) is None:
            raise RuntimeError(f"kernel {kernel_name} is not in the C-simulation library")
        cus = cu_part.strip("{}").split(",") if cu_part else [self.spec.cus[0]]
        if len(cus) != 1 or cus[0] not in self.spec.cus:
            raise RuntimeError(f"{name}: the emulation opens exactly one CU of {self.spec.cus}")
        self.device = dev
        self.cu = dev._cu(self.spec, cus[0])

    def group_id(self, _arg_index: int) -> int:
        return 0  # one flat host memory stands in for every HBM bank

    def __call__(self, *args) -> "run":
        r = run(self)
        for i, value in enumerate(args):
            r.set_arg(i, value)
        r.start()
        return r


class bo:
    class flags(enum.IntEnum):
        normal = 0
        cacheable = 1
        device_only = 2
        host_only = 3

    normal = flags.normal
    cacheable = flags.cacheable

    def __init__(self, dev: device, size: int, flags=flags.normal, group: int = 0):
        if size <= 0:
            raise RuntimeError(f"bo size must be positive, got {size}")
        self._array = np.zeros(size, dtype=np.uint8)  # untouched pages cost no memory

    def size(self) -> int:
        return self._array.size

    def address(self) -> int:
        return self._array.ctypes.data

    def write(self, data, offset: int = 0) -> None:
        src = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
        src = src.reshape(-1).view(np.uint8)
        if offset + src.size > self._array.size:
            raise RuntimeError(f"write of {src.size} bytes at {offset} overflows a {self.size()}-byte bo")
        self._array[offset:offset + src.size] = src

    def read(self, size: int, skip: int = 0) -> np.ndarray:
        return self._array[skip:skip + size].copy()

    def map(self) -> memoryview:
        return memoryview(self._array)

    def sync(self, direction: xclBOSyncDirection, size: int = 0, offset: int = 0) -> None:
        pass  # host memory is the device memory


class run:
    def __init__(self, krnl: kernel):
        self.kernel = krnl
        self._args: list = [None] * len(krnl.spec.args)
        self._state = ert_cmd_state.ERT_CMD_STATE_NEW
        self._done = threading.Event()

    def set_arg(self, index: int, value) -> None:
        self._args[index] = value.address() if isinstance(value, bo) else value

    def start(self) -> None:
        missing = [a.name for a, v in zip(self.kernel.spec.args, self._args) if v is None]
        if missing:
            raise RuntimeError(f"{self.kernel.cu.name}: arguments not set: {', '.join(missing)}")
        self._done.clear()
        self._state = ert_cmd_state.ERT_CMD_STATE_QUEUED
        self.kernel.cu.commands.put(self)

    def _execute(self, cu: _ComputeUnit) -> None:
        self._state = ert_cmd_state.ERT_CMD_STATE_RUNNING
        while cu.name in cu.device.hang_cus:  # a hung CU: nothing completes while it is listed
            if cu.device.closed.wait(0.01):  # (or once the device goes away)
                return
        try:
            cu.fn(*self._args)
            self._state = ert_cmd_state.ERT_CMD_STATE_COMPLETED
        except Exception:  # ctypes argument errors: the command fails like a CU error would
            self._state = ert_cmd_state.ERT_CMD_STATE_ERROR
        self._done.set()

    def wait(self, timeout_ms: int = 0) -> ert_cmd_state:
        """XRT semantics: 0 waits forever; on timeout the state is ERT_CMD_STATE_TIMEOUT."""
        if not self._done.wait(timeout_ms / 1000 if timeout_ms else None):
            return ert_cmd_state.ERT_CMD_STATE_TIMEOUT
        return self._state

    def state(self) -> ert_cmd_state:
        return self._state

    def abort(self) -> ert_cmd_state:
        return self._state
