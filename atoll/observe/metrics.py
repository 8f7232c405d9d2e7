"""Prometheus metrics, named and typed as Triton names them where the meaning is the same.

Triton's durations are cumulative microsecond counters (`nv_inference_*_duration_us`, divided by
`nv_inference_request_success` on dashboards) written without prometheus_client's `_total`; so are
ours: queue (in the batcher), compute input (the rows made in their slots), compute infer (the batch
each row ran in), compute output (outputs taken out of the slots). Atoll's own series carry an
`atoll_` prefix (and `_total` on counters): batches, preprocessing, programs built after load (a
bug), restarts, refusals; GPU series come from NVML (`gpu_metrics.py`). A server is several
processes, so its metrics live in prometheus_client's multiprocess files under one directory, and
whichever process is asked renders the sum. The full list: docs/serving.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.utils import floatToGoString

from atoll.observe.gpu_metrics import GpuMetrics

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"


def share_metrics(directory: str) -> None:
    """Make this process, and the processes it starts from now on, keep metrics in `directory`
    (before any metric is created here)."""
    os.environ[MULTIPROCESS_DIR] = directory
    _use_shared_values()


def _use_shared_values() -> None:
    """prometheus_client's multiprocess values, told this process's pid by a cached read: its
    default asks the kernel (getpid) at every update, three times for each refused request and
    ~8 times for each request a front end serves under overload."""
    values.ValueClass = values.MultiProcessValue(process_identifier=_this_pid)


_pid = os.getpid()


def _this_pid() -> int:
    return _pid


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)
if os.environ.get(MULTIPROCESS_DIR):  # a child of the server: its metrics go to the shared files
    _use_shared_values()


@dataclass(frozen=True)
class ModelMetrics:
    success: Counter
    request_us: Counter
    failure_us: Counter
    pending: Gauge
    last_inference: Gauge
    compute_input_us: Counter
    compute_output_us: Counter
    queue_us: Counter
    count: Counter
    exec_count: Counter
    compute_us: Counter


class Metrics:
    def __init__(self, gpu_uuids=()) -> None:
        """`gpu_uuids`: the server's GPU vGPUs, whose GPUs' NVML readings are rendered too."""
        self.gpus = GpuMetrics(gpu_uuids) if gpu_uuids else None
        self._models: dict[tuple[str, str], ModelMetrics] = {}
        self._children: dict[tuple, Counter | Histogram] = {}  # other labelled series, by family and labels
        self.registry = CollectorRegistry()
        r, mv = self.registry, ("model", "version")
        self.success = Counter("nv_inference_request_success", "Successful requests", mv, registry=r)
        self.failure = Counter("nv_inference_request_failure", "Failed requests",
                               (*mv, "reason"), registry=r)  # fmt: skip
        self.count = Counter("nv_inference_count", "Inferences performed (batch items)", mv, registry=r)
        self.exec_count = Counter("nv_inference_exec_count", "Batches executed", mv, registry=r)
        self.request_us = Counter("nv_inference_request_duration_us",
                                  "Cumulative end-to-end request time", mv, registry=r)  # fmt: skip
        self.queue_us = Counter("nv_inference_queue_duration_us",
                                "Cumulative time items waited in the batcher", mv, registry=r)  # fmt: skip
        self.compute_us = Counter("nv_inference_compute_infer_duration_us",
                                  "Cumulative model execution time", mv, registry=r)  # fmt: skip
        self.compute_input_us = Counter("nv_inference_compute_input_duration_us",
                                        "Cumulative compute input duration in microseconds", mv, registry=r)  # fmt: skip
        self.compute_output_us = Counter("nv_inference_compute_output_duration_us",
                                         "Cumulative compute output duration in microseconds", mv, registry=r)  # fmt: skip
        self.pending = Gauge("nv_inference_pending_request_count",
                             "Instantaneous number of pending requests awaiting execution per-model.", mv,
                             registry=r, multiprocess_mode="livesum")  # fmt: skip
        self.failure_us = Counter("atoll_inference_fail_duration_us",
                                  "Cumulative time of failed requests", mv, registry=r)  # fmt: skip
        self.last_inference = Gauge("atoll_last_inference_timestamp_ms", "When the last request succeeded, "
                                    "in ms since the epoch", mv, registry=r, multiprocess_mode="max")  # fmt: skip
        self.batch_runs = Counter("atoll_batch_executions", "Batches executed, by size",
                                  (*mv, "batch_size"), registry=r)  # fmt: skip
        self.batch_compute_us = Counter("atoll_batch_compute_infer_duration_us",
                                        "Cumulative execution time of batches, by size", (*mv, "batch_size"),
                                        registry=r)  # fmt: skip
        self.preprocess_us = Counter("atoll_preprocess_duration_us",
                                     "Cumulative preprocessing time", ("model", "backend"), registry=r)  # fmt: skip
        self.batch_size = Histogram("atoll_batch_size", "Batch sizes formed by the batcher",
                                    ("model", "bucket", "vgpu"), buckets=BATCH_BUCKETS, registry=r)  # fmt: skip
        self.in_flight = Gauge("atoll_requests_in_flight", "Requests being processed", registry=r,
                               multiprocess_mode="livesum")  # fmt: skip
        self.refused = Counter("atoll_requests_refused", "Requests refused for overload (admission, or request bodies "
                               "past server.body_memory_bytes)", registry=r)  # fmt: skip
        self.evicted = Counter("atoll_connections_evicted", "HTTP connections holding no whole request closed to "
                               "make room for new ones (server.max_connections)", registry=r)  # fmt: skip
        self.refusals_held = Counter("atoll_refusals_held", "503 answers that waited their turn: clients resent "
                                     "refused requests faster than server.refusals_per_answer allows", registry=r)  # fmt: skip
        self.program_builds = Counter("atoll_program_builds", "Programs built after load (a bug)",
                                      ("vgpu",), registry=r)  # fmt: skip
        self.worker_restarts = Counter("atoll_worker_restarts", "Child processes started again after they died",
                                       ("kind",), registry=r)  # fmt: skip
        # Declared real-time models (atoll/supervisor/rt_admission.py)
        self.rt_bound = Gauge("atoll_rt_bound_seconds", "Worst-case response bound of a real-time model",
                              ("model",), registry=r, multiprocess_mode="max")  # fmt: skip
        self.rt_deadline = Gauge("atoll_rt_deadline_seconds", "Declared deadline of a real-time model",
                                 ("model",), registry=r, multiprocess_mode="max")  # fmt: skip
        self.rt_worst = Gauge("atoll_rt_observed_worst_seconds", "Worst real-time response observed "
                              "(dispatcher arrival to answer)", ("model",), registry=r, multiprocess_mode="max")  # fmt: skip
        self.rt_demoted = Counter("atoll_rt_demoted", "Real-time rows demoted to best-effort or refused, by reason "
                                  "(envelope, overrun)", ("model", "reason"), registry=r)  # fmt: skip

    def of(self, model: str, version: str) -> ModelMetrics:
        """A model's per-request series (a labels() lookup costs more than an increment)."""
        found = self._models.get((model, version))
        if found is None:
            labels = (model, version)
            found = self._models[labels] = ModelMetrics(
                *(m.labels(*labels) for m in (self.success, self.request_us, self.failure_us, self.pending,
                                              self.last_inference, self.compute_input_us, self.compute_output_us,
                                              self.queue_us, self.count, self.exec_count, self.compute_us)))
        return found

    def child(self, family, *labels):
        """`family.labels(*labels)`, looked up once (the lanes and the dispatcher count per image and
        per batch)."""
        key = (family, *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = family.labels(*labels)
        return found

    def batch_ran(self, model: str, version: str, rows: int, seconds: float) -> None:
        """A batch of `rows` ran in `seconds` (on a vGPU, or in a front end: its colocated models)."""
        m = self.of(model, version)
        m.exec_count.inc()
        m.count.inc(rows)
        m.compute_us.inc(seconds * rows * 1e6)  # Triton's: each inference's batch time
        self.child(self.batch_runs, model, version, rows).inc()
        self.child(self.batch_compute_us, model, version, rows).inc(seconds * 1e6)

    def families(self) -> list:
        """Every metric family, summed over the server's processes where it has several."""
        directory = os.environ.get(MULTIPROCESS_DIR)
        if directory is None:
            return list(self.registry.collect())
        merged = CollectorRegistry()
        MultiProcessCollector(merged, directory)
        return list(merged.collect())

    def render(self) -> bytes:
        return exposition([*self.families(), *(self.gpus.families() if self.gpus else ())])


def exposition(families) -> bytes:
    """Prometheus's text format, with Triton's counters (`nv_*`) named as Triton writes them: no
    `_total` on the family or its samples."""
    lines = []
    for family in families:
        triton = family.name.startswith("nv_")
        name = family.name + ("_total" if family.type == "counter" and not triton else "")
        lines.append(f"# HELP {name} {family.documentation}")
        lines.append(f"# TYPE {name} {family.type}")
        for sample in family.samples:
            if sample.name.endswith("_created"):  # OpenMetrics only
                continue
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(sample.labels.items()))
            sample_name = sample.name.removesuffix("_total") if triton else sample.name
            lines.append(f"{sample_name}{{{labels}}} {floatToGoString(sample.value)}" if labels
                         else f"{sample_name} {floatToGoString(sample.value)}")  # fmt: skip
    return ("\n".join(lines) + "\n").encode()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
