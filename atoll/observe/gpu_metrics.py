"""GPU utilisation, memory and power through NVML, under Triton's metric names and types.

One sample per physical GPU behind the server's vGPUs (a MIG slice or green-context partition
reports its whole GPU, which is what NVML measures), labelled `gpu_uuid` as Triton labels them.
NVML is read when the metrics are rendered. Without NVML (no driver, no GPU, or `nvidia-ml-py`
missing) there are no GPU series at all, never an error.
"""

from __future__ import annotations

import logging

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

log = logging.getLogger(__name__)

SERIES = (  # name, help, type, NVML reading of a device handle (W and J from mW and mJ)
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "gauge",
     lambda nv, h: nv.nvmlDeviceGetUtilizationRates(h).gpu / 100),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "gauge",
     lambda nv, h: nv.nvmlDeviceGetMemoryInfo(h).total),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "gauge",
     lambda nv, h: nv.nvmlDeviceGetMemoryInfo(h).used),
    ("nv_gpu_power_usage", "GPU power usage in watts", "gauge",
     lambda nv, h: nv.nvmlDeviceGetPowerUsage(h) / 1000),
    ("nv_gpu_power_limit", "GPU power management limit in watts", "gauge",
     lambda nv, h: nv.nvmlDeviceGetPowerManagementLimit(h) / 1000),
    ("nv_energy_consumption", "GPU energy consumption in joules since the Triton Server started", "counter",
     lambda nv, h: nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000),
)  # fmt: skip


class GpuMetrics:
    def __init__(self, uuids, nvml=None):
        """`uuids`: the vGPUs' UUIDs (GPU-... or MIG-...); `nvml`: the pynvml module (a stand-in
        in tests)."""
        self._handles: dict[str, object] = {}
        try:
            if nvml is None:
                import pynvml as nvml
            nvml.nvmlInit()
            for uuid in uuids:
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
                if uuid.startswith("MIG-"):
                    handle = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
                self._handles.setdefault(_text(nvml.nvmlDeviceGetUUID(handle)), handle)
        except Exception as exc:  # ImportError or any NVMLError: no GPU series
            log.info("no GPU metrics: %s", exc)
            self._handles = {}
        self._nvml = nvml

    def families(self) -> list:
        out = []
        for name, text, kind, read in SERIES:
            family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(name, text, labels=["gpu_uuid"])
            for uuid, handle in self._handles.items():
                try:
                    family.add_metric([uuid], read(self._nvml, handle))
                except Exception:  # a reading this GPU does not support (e.g. power on some boards)
                    continue
            if family.samples:
                out.append(family)
        return out


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value
