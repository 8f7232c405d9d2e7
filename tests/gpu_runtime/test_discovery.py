"""vGPU discovery: this machine's CPU vGPUs, and the NVML (MIG / whole GPU) paths against a fake
pynvml module that answers like NVML does on an A100 in MIG mode and on an H100 without it."""

from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass

import pytest

from gpu_runtime import green_context as vgpu_green_context
from gpu_runtime.vgpu import discovery
from gpu_runtime.vgpu.discovery import VGpuUnavailable, discover, discover_vgpus


class FakeNVMLError(Exception):
    pass


@dataclass
class _Mem:
    total: int


@dataclass
class _Attrs:
    multiprocessorCount: int


def fake_pynvml(gpus: list[dict]) -> types.ModuleType:
    """gpus: [{"name", "uuid", "memory", "mig": None | False | [ {name, uuid, memory, sms} ]}]"""
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = FakeNVMLError
    nvml.NVML_DEVICE_MIG_ENABLE = 1
    nvml.calls = []
    nvml.nvmlInit = lambda: nvml.calls.append("init")
    nvml.nvmlShutdown = lambda: nvml.calls.append("shutdown")
    nvml.nvmlDeviceGetCount = lambda: len(gpus)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)

    def entry(handle):
        if handle[0] == "gpu":
            return gpus[handle[1]]
        return gpus[handle[1]]["mig"][handle[2]]

    def mig_mode(handle):
        mig = gpus[handle[1]]["mig"]
        if mig is None:
            raise FakeNVMLError("Not Supported")
        return (1, 1) if mig else (0, 0)

    def mig_handle(handle, i):
        migs = gpus[handle[1]]["mig"]
        if i >= len(migs) or migs[i] is None:
            raise FakeNVMLError("Not Found")
        return ("mig", handle[1], i)

    nvml.nvmlDeviceGetMigMode = mig_mode
    nvml.nvmlDeviceGetMaxMigDeviceCount = lambda h: 7
    nvml.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle
    nvml.nvmlDeviceGetName = lambda h: entry(h)["name"]
    nvml.nvmlDeviceGetUUID = lambda h: entry(h)["uuid"]
    nvml.nvmlDeviceGetMemoryInfo = lambda h: _Mem(entry(h)["memory"])
    nvml.nvmlDeviceGetAttributes = lambda h: _Attrs(entry(h)["sms"])
    return nvml


A100_MIG = {
    "name": b"NVIDIA A100-SXM4-40GB",
    "uuid": "GPU-a100",
    "memory": 40 << 30,
    "mig": [
        {"name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "uuid": "MIG-aaaa", "memory": 5 << 30, "sms": 14},
        None,  # a free slot: NVML answers NOT_FOUND
        {"name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "uuid": "MIG-bbbb", "memory": 20 << 30, "sms": 42},
    ],
}
H100 = {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-h100", "memory": 80 << 30, "mig": False}
T4 = {"name": "Tesla T4", "uuid": "GPU-t4", "memory": 16 << 30, "mig": None}


@pytest.fixture
def nvml(monkeypatch):
    def install(gpus):
        module = fake_pynvml(gpus)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module

    return install


def test_cpu_vgpus_on_this_machine():
    found = discover("cpu")
    cores = len(os.sched_getaffinity(0))
    assert len(found.vgpus) == max(1, cores // 2)
    for i, v in enumerate(found.vgpus):
        assert (v.id, v.kind, v.profile_kind, v.uuid) == (f"cpu{i}", "cpu", "cpu", None)
        assert v.threads == len(v.cpus) >= 1
        assert v.env["CUDA_VISIBLE_DEVICES"] == ""


def test_cpu_vgpu_count_override():
    vgpus = discover_vgpus("cpu", cpu_vgpus=3)
    assert [v.id for v in vgpus] == ["cpu0", "cpu1", "cpu2"]
    assert all(v.threads >= 1 for v in vgpus)
    with pytest.raises(ValueError):
        discover_vgpus("cpu", cpu_vgpus=0)


def test_auto_without_nvml_falls_back_to_cpu_with_reasons(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails like an absent package
    found = discover("auto")
    assert found.vgpus and all(v.kind == "cpu" for v in found.vgpus)
    assert "pynvml" in found.absent["mig"] and "pynvml" in found.absent["gpu"]
    with pytest.raises(VGpuUnavailable, match="MIG"):
        discover("mig")
    with pytest.raises(VGpuUnavailable, match="GPU"):
        discover("gpu")


def test_nvml_init_failure_is_a_reason(nvml):
    module = nvml([])

    def refuse():
        raise FakeNVMLError("Driver Not Loaded")

    module.nvmlInit = refuse
    found = discover("auto")
    assert found.absent["mig"] == "NVML unavailable: Driver Not Loaded"
    assert found.vgpus[0].kind == "cpu"


def test_mig_instances_through_nvml(nvml):
    module = nvml([A100_MIG, T4])
    vgpus = discover_vgpus("auto")
    assert [(v.id, v.kind, v.uuid, v.profile_kind, v.sm_count, v.memory_bytes) for v in vgpus] == [
        ("mig0", "mig", "MIG-aaaa", "a100-1g.5gb", 14, 5 << 30),
        ("mig1", "mig", "MIG-bbbb", "a100-3g.20gb", 42, 20 << 30),
    ]
    assert vgpus[0].env == {"CUDA_VISIBLE_DEVICES": "MIG-aaaa"}
    assert module.calls.count("init") == module.calls.count("shutdown")


def test_whole_gpus_when_mig_is_off(nvml):
    nvml([H100, T4])
    found = discover("auto")
    assert [(v.id, v.kind, v.uuid, v.profile_kind, v.memory_bytes) for v in found.vgpus] == [
        ("gpu0", "gpu", "GPU-h100", "h100", 80 << 30),
        ("gpu1", "gpu", "GPU-t4", "t4", 16 << 30),
    ]
    assert found.vgpus[0].env == {"CUDA_VISIBLE_DEVICES": "GPU-h100"}
    assert "MIG mode is off" in found.absent["mig"]
    with pytest.raises(VGpuUnavailable):
        discover("mig")


def test_green_context_partitions(nvml, monkeypatch):
    nvml([H100])

    monkeypatch.setattr(vgpu_green_context, "partition_count", lambda uuid, sms: 132 // sms)
    monkeypatch.setattr(vgpu_green_context, "device_sm_count", lambda uuid: 132)
    vgpus = discover_vgpus("gpu", green_context_sms=32)
    assert [v.id for v in vgpus] == ["gpu0.gc0", "gpu0.gc1", "gpu0.gc2", "gpu0.gc3"]
    assert {(v.kind, v.profile_kind, v.sm_count) for v in vgpus} == {("green_context", "h100-32sm", 32)}
    assert [v.green_context for v in vgpus] == [(k, 32) for k in range(4)]


def test_green_context_failure_falls_back_to_whole_gpu(nvml, monkeypatch):
    nvml([H100])

    def refuse(uuid, sms):
        raise RuntimeError("driver 12.2 < 12.4")

    monkeypatch.setattr(vgpu_green_context, "partition_count", refuse)
    found = discover("auto", green_context_sms=16)
    assert [v.id for v in found.vgpus] == ["gpu0"]
    assert "12.4" in found.absent["green_context"]
    with pytest.raises(VGpuUnavailable, match="green"):
        discover("gpu", green_context_sms=16)


def test_unknown_mode():
    with pytest.raises(ValueError):
        discover("tpu")


def test_family_names():
    assert discovery._family("NVIDIA A100-SXM4-40GB") == "a100"
    assert discovery._family("NVIDIA H100 80GB HBM3") == "h100"
    assert discovery._family("NVIDIA GeForce RTX 4090") == "geforce-rtx-4090"  # no model token: the whole name
