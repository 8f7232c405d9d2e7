"""Emulated XRT: pyxrt's names (a subset, nothing pyxrt lacks), run on the host.

As in XRT's software emulation, kernels run the HLS C++ compiled for the host (`fpga_host.csim`)
through ctypes, which releases the GIL. One worker thread per CU runs its commands in order: the CUs
of a device run concurrently, a CU never runs two commands at once. An "xclbin" is the manifest
JSON; buffer objects are NumPy arrays. Every public pyxrt-class name here is one pyxrt binds
(tests/fpga_host/test_pyxrt_surface.py); what only the emulation needs is in `CONTROL`'s functions.
Each completed image_cu run also carries the hardware cycles a card would take, from the measured
cycle model (`fpga_host.dpu_cycles`; `cycles(run)`). Fault injection: CUs named in `ATOLL_EMU_HANG_CUS` (comma-separated) at open, or passed to `hang()`,
complete no command while hung, so their commands stay RUNNING (`release()` aborts them).
"""

from __future__ import annotations

import ctypes
import enum
import os
import queue
import threading
import uuid as _uuid

import numpy as np

from fpga_host import csim, dpu_cycles
from fpga_host.manifest import KernelSpec, Manifest, load_manifest

_CTYPES = {"bo": ctypes.c_void_p, "u32": ctypes.c_uint32}
CONTROL = ("load_default_library", "use_library", "hang", "release", "cycles")
_RUNNING = 3  # ert.h's ERT_CMD_STATE_RUNNING: pyxrt returns it unnamed


class ert_cmd_state(enum.IntEnum):  # values as in XRT's ert.h; pyxrt names no RUNNING (3)
    ERT_CMD_STATE_NEW = 1
    ERT_CMD_STATE_QUEUED = 2
    ERT_CMD_STATE_COMPLETED = 4
    ERT_CMD_STATE_ERROR = 5
    ERT_CMD_STATE_ABORT = 6
    ERT_CMD_STATE_SUBMITTED = 7
    ERT_CMD_STATE_TIMEOUT = 8
    ERT_CMD_STATE_NORESPONSE = 9
    ERT_CMD_STATE_SKERROR = 10
    ERT_CMD_STATE_SKCRASHED = 11


class xrt_info_device(enum.IntEnum):  # the keys the probe asks for
    name = 5


class xclBOSyncDirection(enum.IntEnum):
    XCL_BO_SYNC_BO_TO_DEVICE = 0
    XCL_BO_SYNC_BO_FROM_DEVICE = 1


def load_default_library() -> ctypes.CDLL:
    """The C-simulation library of the DPU kernels (tests substitute their own)."""
    return csim.load_library()


def use_library(dev: "device", library: ctypes.CDLL) -> None:
    """Run `library`'s kernels on `dev` instead of the default one (before loading an xclbin)."""
    dev._library = library


def hang(dev: "device", cus, hung: bool = True) -> None:
    """Make the named CUs complete nothing (a hung CU), or let them finish again."""
    (dev._hung.update if hung else dev._hung.difference_update)(cus)


def cycles(r: "run") -> int | None:
    """Modelled hardware cycles of a completed run; None for kernels the model does not cover."""
    return r._cycles


def release(dev: "device") -> None:
    """Stop the device's CU threads; hung commands end in ERT_CMD_STATE_ABORT."""
    dev._closed.set()
    for cu in dev._cus.values():
        cu.commands.put(None)


class uuid:
    def __init__(self, value: str):
        self._value = value

    def to_string(self) -> str:
        return self._value

    def __eq__(self, other) -> bool:
        return isinstance(other, uuid) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class xclbin:
    """Reads the manifest JSON where real XRT reads the binary container."""

    class xclbinkernel:
        def __init__(self, spec: KernelSpec):
            self._spec = spec

        def get_name(self) -> str:
            return self._spec.name

        def get_num_args(self) -> int:
            return len(self._spec.args)

    def __init__(self, path: str | os.PathLike):
        self._manifest: Manifest = load_manifest(path)
        self._uuid = uuid(str(_uuid.uuid5(_uuid.NAMESPACE_URL, str(self._manifest.path.resolve()))))

    def get_uuid(self) -> uuid:
        return self._uuid

    def get_kernels(self) -> list[xclbinkernel]:
        return [self.xclbinkernel(k) for k in self._manifest.kernels.values()]

    def get_xsa_name(self) -> str:
        return "atoll-emulated-dpu"


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
    def __init__(self, index: int = 0):
        if index != 0:
            raise RuntimeError(f"emulated XRT has one device (index 0), not {index}")
        self._library: ctypes.CDLL | None = None
        self._hung: set[str] = {c for c in os.environ.get("ATOLL_EMU_HANG_CUS", "").split(",") if c}
        self._closed = threading.Event()  # releases hung commands so threads can exit
        self._xclbin: xclbin | None = None
        self._cycle_model = dpu_cycles.load()
        self._cus: dict[str, _ComputeUnit] = {}
        self._lock = threading.Lock()

    def get_info(self, _key=None) -> str:
        return "atoll-emulated-dpu"

    def get_xclbin_uuid(self) -> uuid:
        return self._xclbin.get_uuid() if self._xclbin else uuid("")

    def load_xclbin(self, xb: xclbin) -> uuid:
        if self._library is None:
            self._library = load_default_library()
        for spec in xb._manifest.kernels.values():
            # A kernel whose sources are not in the library yet cannot be opened (kernel() says so),
            # like a CU missing from a partial bitstream; the others work.
            fn = getattr(self._library, spec.name, None)
            if fn is not None:
                fn.argtypes = [_CTYPES[a.kind] for a in spec.args]
                fn.restype = None
        self._xclbin = xb
        return xb.get_uuid()

    register_xclbin = load_xclbin

    def _cu(self, spec: KernelSpec, name: str) -> _ComputeUnit:
        with self._lock:
            if name not in self._cus:
                self._cus[name] = _ComputeUnit(self, name, getattr(self._library, spec.name))
            return self._cus[name]


class hw_context:
    """An xclbin registered on a device, as XRT 2.20+ opens kernels (pyxrt binds only its
    constructors)."""

    def __init__(self, dev: device | None = None, xclbin_uuid: uuid | None = None):
        if dev is not None and (dev._xclbin is None or dev._xclbin.get_uuid() != xclbin_uuid):
            raise RuntimeError("xclbin not registered on this device")
        self._device = dev


class kernel:
    class cu_access_mode(enum.IntEnum):
        exclusive = 0
        shared = 1
        none = 2

    exclusive = cu_access_mode.exclusive
    shared = cu_access_mode.shared
    none = cu_access_mode.none

    def __init__(self, *args):
        """pyxrt's two forms: kernel(hw_context, name), and XRT's older kernel(device, uuid,
        name[, mode]), a deprecated shim from XRT 2.26 on."""
        if isinstance(args[0], hw_context):
            dev, name = args[0]._device, args[1]
        else:
            dev, xclbin_uuid, name = args[:3]
            hw_context(dev, xclbin_uuid)  # the same check
        kernel_name, _, cu_part = name.partition(":")
        self._spec = dev._xclbin._manifest.kernel(kernel_name)
        if getattr(dev._library, kernel_name, None) is None:
            raise RuntimeError(f"kernel {kernel_name} is not in the C-simulation library")
        cus = cu_part.strip("{}").split(",") if cu_part else [self._spec.cus[0]]
        if len(cus) != 1 or cus[0] not in self._spec.cus:
            raise RuntimeError(f"{name}: the emulation opens exactly one CU of {self._spec.cus}")
        self._cu = dev._cu(self._spec, cus[0])

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
    device_only = flags.device_only
    host_only = flags.host_only

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
        self._kernel = krnl
        self._args: list = [None] * len(krnl._spec.args)
        self._bos: dict[str, bo] = {}
        self._cycles: int | None = None
        self._state = ert_cmd_state.ERT_CMD_STATE_NEW
        self._done = threading.Event()

    def set_arg(self, index: int, value) -> None:
        """pyxrt binds a bo or a C `int`: anything else is a TypeError there, and here."""
        if isinstance(value, bo):
            self._args[index] = value.address()
            self._bos[self._kernel._spec.args[index].name] = value
        elif isinstance(value, int) and not isinstance(value, bool) and -(1 << 31) <= value < 1 << 31:
            self._args[index] = value & 0xFFFFFFFF
        else:
            raise TypeError(f"set_arg(): incompatible arguments: {type(value).__name__} {value!r} is "
                            "neither a bo nor a C int")

    def start(self) -> None:
        missing = [a.name for a, v in zip(self._kernel._spec.args, self._args) if v is None]
        if missing:
            raise RuntimeError(f"{self._kernel._cu.name}: arguments not set: {', '.join(missing)}")
        self._done.clear()
        self._state = ert_cmd_state.ERT_CMD_STATE_QUEUED
        self._kernel._cu.commands.put(self)

    def _execute(self, cu: _ComputeUnit) -> None:
        self._state = _RUNNING
        while cu.name in cu.device._hung:  # a hung CU: nothing completes while it is listed
            if cu.device._closed.wait(0.01):  # until the device is released, which aborts it
                self._state = ert_cmd_state.ERT_CMD_STATE_ABORT
                self._done.set()
                return
        try:
            cu.fn(*self._args)
            self._cycles = self._modelled_cycles(cu.device._cycle_model)
            self._state = ert_cmd_state.ERT_CMD_STATE_COMPLETED
        except Exception:  # ctypes argument errors: the command fails like a CU error would
            self._state = ert_cmd_state.ERT_CMD_STATE_ERROR
        self._done.set()

    def _modelled_cycles(self, model: dpu_cycles.CycleModel) -> int | None:
        """What the run would take on a card: the model on its JPEG and the output size it wrote
        (status words 2 and 3); a run that ends with an error status is its header's cost."""
        spec = self._kernel._spec
        if spec.name != model.kernel:
            return None
        length = self._args[[a.name for a in spec.args].index("jpeg_len")]
        status = self._bos["status"].read(16).view(np.uint32)
        out_h, out_w = (int(status[2]), int(status[3])) if status[0] == 0 else (0, 0)
        found = model.image_cycles(bytes(self._bos["jpeg"].read(length)), out_h, out_w)
        return round(model.coefficients["image"]) if found is None or status[0] != 0 else found

    def wait(self, timeout_ms: int = 0) -> ert_cmd_state:
        """XRT semantics: 0 waits forever; on timeout the state is ERT_CMD_STATE_TIMEOUT."""
        if not self._done.wait(timeout_ms / 1000 if timeout_ms else None):
            return ert_cmd_state.ERT_CMD_STATE_TIMEOUT
        return self._state

    def wait2(self) -> None:
        """Blocks until the run ends; raises (pyxrt: a RuntimeError) unless it completed."""
        self._done.wait()
        if self._state != ert_cmd_state.ERT_CMD_STATE_COMPLETED:
            raise RuntimeError(f"command ended in {ert_cmd_state(self._state).name}")

    def state(self) -> ert_cmd_state:
        return self._state
