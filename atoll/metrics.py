"""Prometheus metrics, named as Triton names them where the meaning is the same.

Triton exports durations as cumulative microsecond counters (`nv_inference_*_duration_us`), so
dashboards divide by `nv_inference_request_success`; we do the same. Atoll's own series carry an
`atoll_` prefix: batch sizes per model, bucket and vGPU, preprocessing time per backend,
programs built after load (a bug if it ever moves: every shape is built at load), and child
processes restarted after they died, by kind (vgpu, front_end).

A server is several processes (front ends count requests, the supervisor's dispatcher counts
batches), so its metrics live in prometheus_client's multiprocess files under one directory, and
whichever process is asked renders the sum over all of them.
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"


def share_metrics(directory: str) -> None:
    """Make this process, and the processes it starts from now on, keep metrics in `directory`
    (before any metric is created here)."""
    os.environ[MULTIPROCESS_DIR] = directory
    values.ValueClass = values.get_value_class()


class Metrics:
    def __init__(self) -> None:
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
        self.preprocess_us = Counter("atoll_preprocess_duration_us",
                                     "Cumulative preprocessing time", ("model", "backend"), registry=r)  # fmt: skip
        self.batch_size = Histogram("atoll_batch_size", "Batch sizes formed by the batcher",
                                    ("model", "bucket", "vgpu"), buckets=BATCH_BUCKETS, registry=r)  # fmt: skip
        self.in_flight = Gauge("atoll_requests_in_flight", "Requests being processed", registry=r,
                               multiprocess_mode="livesum")  # fmt: skip
        self.refused = Counter("atoll_requests_refused", "Requests refused for overload", registry=r)
        self.program_builds = Counter("atoll_program_builds", "Programs built after load (a bug)",
                                      ("vgpu",), registry=r)  # fmt: skip
        self.worker_restarts = Counter("atoll_worker_restarts", "Child processes started again after they died",
                                       ("kind",), registry=r)  # fmt: skip

    def render(self) -> bytes:
        directory = os.environ.get(MULTIPROCESS_DIR)
        if directory is None:
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        MultiProcessCollector(merged, directory)
        return generate_latest(merged)
