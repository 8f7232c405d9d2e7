"""Metrics written as Triton writes them, the statistics endpoint read from them, and GPU metrics
through NVML (a stand-in module here; absent NVML means no GPU series)."""

import os
from types import SimpleNamespace

from prometheus_client import values
from prometheus_client.parser import text_string_to_metric_families

from atoll.kserve.statistics import model_statistics
from atoll.observe.gpu_metrics import GpuMetrics
from atoll.observe.metrics import MULTIPROCESS_DIR, Metrics, share_metrics


def test_triton_counters_have_no_total_suffix_and_statistics_read_them():
    m = Metrics()
    model = m.of("m", "1")
    model.success.inc(3)
    model.request_us.inc(300)
    model.compute_input_us.inc(30)
    model.pending.inc()
    m.failure.labels("m", "1", "REJECTED").inc()
    m.failure.labels("m", "1", "TIMEOUT").inc()
    m.count.labels("m", "1").inc(5)
    m.exec_count.labels("m", "1").inc(2)
    m.batch_runs.labels("m", "1", 4).inc()
    m.batch_compute_us.labels("m", "1", 4).inc(12.5)
    m.program_builds.labels("cpu0").inc(0)
    text = m.render().decode()
    assert "# TYPE nv_inference_request_success counter" in text
    assert 'nv_inference_request_success{model="m",version="1"} 3.0' in text
    assert "# TYPE atoll_program_builds_total counter" in text  # Atoll's own keep Prometheus's suffix
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["nv_inference_pending_request_count"].type == "gauge"
    assert families["nv_inference_compute_input_duration_us"].type == "counter"

    [stats] = model_statistics(m.families(), [("m", "1")])["model_stats"]
    assert stats["inference_count"] == 5 and stats["execution_count"] == 2
    assert stats["inference_stats"]["success"] == {"count": 3, "ns": 300_000}
    assert stats["inference_stats"]["fail"]["count"] == 2  # every reason
    assert stats["inference_stats"]["compute_input"] == {"count": 3, "ns": 30_000}
    assert stats["batch_stats"] == [{"batch_size": 4, "compute_input": {"count": 0, "ns": 0},
                                     "compute_infer": {"count": 1, "ns": 12_500},
                                     "compute_output": {"count": 0, "ns": 0}}]  # fmt: skip


def fake_nvml():
    gpu = object()

    def handle(uuid):
        if uuid == "GPU-missing":
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return gpu if uuid.startswith("GPU") else ("mig", uuid)

    return SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetHandleByUUID=handle,
        nvmlDeviceGetDeviceHandleFromMigDeviceHandle=lambda h: gpu,
        nvmlDeviceGetUUID=lambda h: b"GPU-abc",
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=37),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=80 << 30, used=3 << 30),
        nvmlDeviceGetPowerUsage=lambda h: 123_000, nvmlDeviceGetPowerManagementLimit=lambda h: 700_000,
        nvmlDeviceGetTotalEnergyConsumption=lambda h: 5_000_000,
    )  # fmt: skip


def test_gpu_metrics_per_physical_gpu_with_tritons_names():
    # two MIG slices of one GPU report it once, under its own UUID
    families = {f.name: f for f in GpuMetrics(["MIG-1", "MIG-2"], fake_nvml()).families()}
    assert {s.labels["gpu_uuid"] for f in families.values() for s in f.samples} == {"GPU-abc"}
    value = {name: f.samples[0].value for name, f in families.items()}
    assert value["nv_gpu_utilization"] == 0.37 and value["nv_gpu_memory_used_bytes"] == 3 << 30
    assert value["nv_gpu_power_usage"] == 123.0 and value["nv_energy_consumption"] == 5000.0
    assert families["nv_energy_consumption"].type == "counter"


def test_without_nvml_there_are_no_gpu_series():
    def no_driver():
        raise RuntimeError("NVML Shared Library Not Found")

    assert GpuMetrics(["GPU-0"], SimpleNamespace(nvmlInit=no_driver)).families() == []
    assert GpuMetrics(["GPU-missing"], fake_nvml()).families() == []


def test_shared_metrics_of_a_forked_child_go_to_its_own_file_and_are_summed(tmp_path, monkeypatch):
    """The shared values learn their process's pid once (and again after a fork), not from a
    getpid call at every update: a forked child must still write a file of its own."""
    monkeypatch.setattr(values, "ValueClass", values.ValueClass)  # both restored afterwards
    monkeypatch.setenv(MULTIPROCESS_DIR, str(tmp_path))
    share_metrics(str(tmp_path))
    m = Metrics()
    m.refused.inc()
    child = os.fork()
    if child == 0:
        m.refused.inc(2)
        os._exit(0)
    os.waitpid(child, 0)
    counters = sorted(f.name for f in tmp_path.glob("counter_*"))
    assert counters == sorted(f"counter_{pid}.db" for pid in (os.getpid(), child))
    assert "atoll_requests_refused_total 3.0" in m.render().decode()
