"""The driver calls only what pyxrt binds, and the emulated XRT offers nothing pyxrt lacks.

PYXRT is pyxrt's Python surface in XRT 2.20 (the 2025.2 release: XRT_VERSION_RELEASE 202520 in
src/CMake/settings.cmake), read from src/python/pybind11/src/pyxrt.cpp of Xilinx/XRT at that
version: the classes and functions of the module, and each class's methods and exported enum
values. Kernels open from a `hw_context(device, register_xclbin(xclbin))`: in XRT 2.26 (2026.2)
`load_xclbin` and `kernel(device, uuid, name)` are deprecated shims. `ert_cmd_state` names no
ERT_CMD_STATE_RUNNING (3), so a running command's state is an
unnamed value. `run` binds no `abort` (xrt::run::abort is C++ only); its `wait2(timeout)` takes a
std::chrono::milliseconds and returns std::cv_status, for which pyxrt.cpp includes no pybind11
caster (pybind11/chrono.h), so from Python only `wait2()` without a timeout is callable.
"""

from __future__ import annotations

import enum
import inspect
import sys
import time

import numpy as np
import pytest

from fpga_host import emu_xrt, xrt_driver
from fpga_host.dpu_driver import CuFailure, DpuDriver
from fpga_host.manifest import DEFAULT_MANIFEST, load_manifest
from fpga_host.xrt_driver import XrtPort
from tests.fpga_host.fake_dpu import fake_device, fake_library  # noqa: F401 (fixture)
from atoll.bench.corpus import jpeg_bytes, tone

PYXRT_MODULE = {
    "XCL_BO_FLAGS_NONE", "xclBOSyncDirection", "ert_cmd_state", "xrt_info_device", "xrt_msg_level",
    "enumerate_devices", "log_message", "uuid", "hw_context", "device", "run", "kernel", "bo",
    "xclbin", "xclbinip_vector", "xclbinkernel_vector", "xclbinmem_vector", "elf", "program",
    "module", "ext", "runlist",
}
PYXRT = {
    "uuid": {"to_string"},
    "hw_context": set(),  # constructors only in 2.20
    "device": {"load_xclbin", "register_xclbin", "get_xclbin_uuid", "get_info"},
    "run": {"start", "set_arg", "wait", "wait2", "state", "add_callback"},
    "kernel": {"cu_access_mode", "exclusive", "shared", "none", "__call__", "group_id"},
    "bo": {"flags", "normal", "cacheable", "device_only", "host_only", "p2p", "svm", "write", "read",
           "sync", "map", "size", "address"},
    "xclbin": {"xclbinip", "xclbinkernel", "xclbinmem", "get_kernels", "get_xsa_name", "get_uuid",
               "get_mems", "get_axlf"},
    "xclbin.xclbinkernel": {"get_name", "get_num_args"},
}
PYXRT_ENUMS = {
    "ert_cmd_state": {"ERT_CMD_STATE_NEW", "ERT_CMD_STATE_QUEUED", "ERT_CMD_STATE_COMPLETED",
                      "ERT_CMD_STATE_ERROR", "ERT_CMD_STATE_ABORT", "ERT_CMD_STATE_SUBMITTED",
                      "ERT_CMD_STATE_TIMEOUT", "ERT_CMD_STATE_NORESPONSE", "ERT_CMD_STATE_SKERROR",
                      "ERT_CMD_STATE_SKCRASHED"},  # fmt: skip
    "xclBOSyncDirection": {"XCL_BO_SYNC_BO_TO_DEVICE", "XCL_BO_SYNC_BO_FROM_DEVICE",
                           "XCL_BO_SYNC_BO_GMIO_TO_AIE", "XCL_BO_SYNC_BO_AIE_TO_GMIO"},
    "xrt_info_device": {"bdf", "interface_uuid", "kdma", "max_clock_frequency_mhz", "m2m", "name",
                        "nodma", "offline", "electrical", "thermal", "mechanical", "memory",
                        "platform", "pcie_info", "host", "dynamic_regions", "vmr"},
    "kernel.cu_access_mode": {"exclusive", "shared", "none"},
    "bo.flags": {"normal", "cacheable", "device_only", "host_only", "p2p", "svm"},
}
# The XRT 2.20 values of ert_cmd_state (xrt/detail/ert.h), which the emulation mirrors.
ERT_VALUES = {"ERT_CMD_STATE_NEW": 1, "ERT_CMD_STATE_COMPLETED": 4,
              "ERT_CMD_STATE_TIMEOUT": 8, "ERT_CMD_STATE_SKCRASHED": 11}


def public(cls) -> set[str]:
    own = set()
    for klass in cls.__mro__[:-1]:
        if klass.__module__ == emu_xrt.__name__:
            own |= {n for n in vars(klass) if not n.startswith("_") or n == "__call__"}
    return own


def emulated_classes():
    for name, obj in vars(emu_xrt).items():
        if inspect.isclass(obj) and obj.__module__ == emu_xrt.__name__ and not name.startswith("_"):
            yield name, obj
            for inner, sub in vars(obj).items():
                if inspect.isclass(sub) and not inner.startswith("_") and sub.__module__ == emu_xrt.__name__:
                    yield f"{name}.{inner}", sub


def test_the_emulation_offers_only_pyxrt_names():
    module = {n for n, o in vars(emu_xrt).items() if not n.startswith("_")
              and getattr(o, "__module__", None) == emu_xrt.__name__}
    assert module - set(emu_xrt.CONTROL) <= PYXRT_MODULE, module - set(emu_xrt.CONTROL) - PYXRT_MODULE
    assert not set(emu_xrt.CONTROL) & PYXRT_MODULE
    for name, cls in emulated_classes():
        if issubclass(cls, enum.Enum):
            assert set(cls.__members__) <= PYXRT_ENUMS[name], name
        else:
            assert public(cls) <= PYXRT[name], (name, public(cls) - PYXRT[name])
    assert not hasattr(emu_xrt.run, "abort")
    assert {k: emu_xrt.ert_cmd_state[k].value for k in ERT_VALUES} == ERT_VALUES


class Recorder:
    """pyxrt's module as the driver sees it: every name it reads, on the module and on the objects
    the module's classes make, is recorded."""

    def __init__(self, module, used: set):
        self._module, self._used = module, used

    def __getattr__(self, name):
        if not name.startswith("__"):  # the import system reads __spec__ and the like
            self._used.add(name)
        return getattr(self._module, name)


@pytest.fixture
def recorded(monkeypatch):
    used: dict[str, set] = {"module": set()}
    for name, cls in emulated_classes():
        if issubclass(cls, enum.Enum):
            continue
        names = used.setdefault(name, set())

        def record(self, attr, _names=names, _cls=cls):
            if not attr.startswith("_"):
                _names.add(attr)
            return object.__getattribute__(self, attr)

        monkeypatch.setattr(cls, "__getattribute__", record, raising=False)
    return used


def test_the_driver_uses_only_pyxrt_names_and_a_hung_cu_leaves_service(fake_library, recorded):
    device = fake_device(fake_library, hang={"image_cu_2"})
    manifest = load_manifest(DEFAULT_MANIFEST)
    port = XrtPort(Recorder(emu_xrt, recorded["module"]), device, manifest.path,
                   on_close=lambda: emu_xrt.release(device))
    driver = DpuDriver(port, manifest, backend="emu", cu_timeout_s=0.3)
    try:
        images = [driver.submit_image(jpeg_bytes(32, 32, seed=i)) for i in range(6)]
        audio = driver.submit_audio(tone(0.3, 16000), 16000)
        failures = [f.exception(10) for f in images if f.exception(10) is not None]
        assert len(failures) == 1 and isinstance(failures[0], CuFailure) and "image_cu_2" in str(failures[0])
        assert driver.cu_states()["image_cu_2"] == "failed"
        assert audio.result(10).array.shape[0] == 80
        emu_xrt.hang(device, {"image_cu_2"}, hung=False)  # its late command ends: back in service
        deadline = time.monotonic() + 30
        while driver.cu_states()["image_cu_2"] != "ok":
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        driver.close()
    assert recorded["module"] <= PYXRT_MODULE
    for name, names in recorded.items():
        if name != "module":
            assert names <= PYXRT[name], (name, names - PYXRT[name])
    assert "state" in recorded["run"] and "abort" not in recorded["run"]
    assert "wait" not in recorded["run"]  # its timeout can be masked; the driver polls state()
    assert "hw_context" in recorded["module"] and "load_xclbin" not in recorded["device"]


def test_scalars_are_passed_as_the_c_int_pyxrt_binds():
    assert xrt_driver.c_int(7) == 7
    assert xrt_driver.c_int(0xFFFFFFFF) == -1 and xrt_driver.c_int(1 << 31) == -(1 << 31)
    with pytest.raises(ValueError):
        xrt_driver.c_int(1 << 32)


def test_probe_reads_only_pyxrt_names(monkeypatch):
    used: set = set()
    monkeypatch.setitem(sys.modules, "pyxrt", Recorder(emu_xrt, used))
    report = xrt_driver.probe_xrt(DEFAULT_MANIFEST)
    assert report["devices"] == ["atoll-emulated-dpu"] and not report["available"]  # no xclbin built
    assert used <= PYXRT_MODULE and used


def test_bo_round_trip_through_the_port(fake_library):
    device = fake_device(fake_library)
    manifest = load_manifest(DEFAULT_MANIFEST)
    port = XrtPort(emu_xrt, device, manifest.path, on_close=lambda: emu_xrt.release(device))
    cu = port.open_cu("image_cu", "image_cu_1")
    buf = port.buffer(cu, 0, 16)
    port.write(buf, np.arange(16, dtype=np.uint8))
    assert port.size(buf) == 16 and list(port.read(buf, 4)) == [0, 1, 2, 3]
    port.close()
