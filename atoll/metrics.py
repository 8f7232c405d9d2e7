"""Prometheus metrics, named as Triton names them where the meaning is the same.

Triton exports durations as cumulative microsecond counters (`nv_inference_*_duration_us`), so
dashboards divide by `nv_inference_request_success`; we do the same. Atoll's own series carry an
`atoll_` prefix: batch sizes per model, bucket and vGPU, preprocessing time per backend.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


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
        self.in_flight = Gauge("atoll_requests_in_flight", "Requests being processed", registry=r)
        self.refused = Counter("atoll_requests_refused", "Requests refused for overload", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
