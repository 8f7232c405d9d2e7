"""The emulated XRT follows pyxrt's call shapes and XRT's command states (values from XRT's ert.h)."""

from __future__ import annotations

import numpy as np
import pytest

from fpga_host import emu_xrt
from fpga_host.manifest import DEFAULT_MANIFEST
from tests.fpga_host.fake_dpu import fake_device, fake_library  # noqa: F401 (fixture)
from atoll.bench.corpus import jpeg_bytes


def _open(library):
    dev = fake_device(library)
    xb = emu_xrt.xclbin(str(DEFAULT_MANIFEST))
    uuid = dev.load_xclbin(xb)
    return dev, xb, uuid


def test_pyxrt_style_round_trip(fake_library):
    dev, xb, uuid = _open(fake_library)
    assert [k.get_name() for k in xb.get_kernels()] == ["image_cu", "audio_mel_cu", "audio_norm_cu"]
    k = emu_xrt.kernel(dev, uuid, "image_cu:{image_cu_3}", emu_xrt.kernel.cu_access_mode.exclusive)
    data = jpeg_bytes(40, 30)
    bos = [emu_xrt.bo(dev, size, emu_xrt.bo.flags.normal, k.group_id(i))
           for i, size in ((0, len(data)), (2, 16), (4, 224 * 224 * 3), (6, 32))]
    bos[0].write(data, 0)
    bos[0].sync(emu_xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE, len(data), 0)
    run = k(bos[0], len(data), bos[1], 16, bos[2], bos[2].size(), bos[3], 2, 256, 224, 0, 8192)
    assert run.wait(5000) == emu_xrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED
    status = np.frombuffer(bos[3].map(), np.uint32)
    assert list(status[:4]) == [0, 3, 224, 224] and status[7] == 224 * 224 * 3
    src = np.frombuffer(data, np.uint8)
    np.testing.assert_array_equal(bos[2].read(10, 0), src[:10])
    emu_xrt.release(dev)


def test_hang_injection_and_errors(fake_library, monkeypatch):
    monkeypatch.setenv("ATOLL_EMU_HANG_CUS", "image_cu_1")
    dev, _, uuid = _open(fake_library)
    assert dev._hung == {"image_cu_1"}
    k = emu_xrt.kernel(dev, uuid, "image_cu:{image_cu_1}")
    bo = emu_xrt.bo(dev, 64)
    run = emu_xrt.run(k)
    with pytest.raises(RuntimeError, match="arguments not set"):
        run.start()
    for i in range(12):
        run.set_arg(i, bo if i in (0, 2, 4, 6) else 0)
    run.start()
    assert run.wait(50) == emu_xrt.ert_cmd_state.ERT_CMD_STATE_TIMEOUT
    assert run.state() == 3  # ert.h's RUNNING, which pyxrt returns unnamed
    with pytest.raises(TypeError, match="neither a bo nor a C int"):
        run.set_arg(1, 1 << 31)  # pyxrt binds a signed 32-bit int
    with pytest.raises(RuntimeError, match="overflows"):
        bo.write(b"x" * 65, 0)
    with pytest.raises(RuntimeError, match="exactly one CU"):
        emu_xrt.kernel(dev, uuid, "image_cu:{image_cu_9}")
    with pytest.raises(RuntimeError, match="one device"):
        emu_xrt.device(1)
    emu_xrt.release(dev)  # releases the hung command's thread
