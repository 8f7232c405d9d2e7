"""Residency's Prometheus series, written from the vGPU worker (its process shares the server's
multiprocess metrics directory). Durations are cumulative microseconds as Triton writes them
(divide by `atoll_model_switches_total` for the mean); Atoll's own counters end in `_total`."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

LABELS = ("model", "version", "vgpu")
SWITCHES = Counter("atoll_model_switches", "Switches of a model into a vGPU's memory", LABELS)
SWITCH_DURATION_US = Counter("atoll_model_switch_duration_us",
                             "Cumulative request-to-last-group time of switches (microseconds)", LABELS)
SWITCH_STARTUP_US = Counter("atoll_model_switch_startup_us",
                            "Cumulative request-to-first-launch time of switches (microseconds)", LABELS)
SWITCH_BYTES = Counter("atoll_model_switch_bytes", "Weight bytes moved into a vGPU by switches", LABELS)
EVICTIONS = Counter("atoll_model_evictions", "Models evicted from a vGPU's memory", LABELS)
RESIDENT_BYTES = Gauge("atoll_resident_weight_bytes", "Weight bytes resident in a vGPU's pool",
                       ("vgpu",), multiprocess_mode="livesum")


def labels(model: str, vgpu: str) -> tuple[str, str, str]:
    """A series' labels: the server names a served version `name/version` inside (its workers
    too), its metrics carry the two apart, as Triton's do."""
    name, _, version = model.partition("/")
    return name, version, vgpu
