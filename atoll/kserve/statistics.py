"""Triton's statistics extension: per-model counts and cumulative durations, read from the metrics.

A server's requests are counted in its front ends and its batches in its dispatcher, so the one
place that sees them all is the metrics every process writes (`observe/metrics.py`); the statistics are
those same counters in Triton's shape (`ModelStatistics`), durations in nanoseconds. The request
counts of Triton's `inference_stats` are requests; `inference_count` counts batch rows (Triton's
inferences), `execution_count` batches. `batch_stats` gives each batch size's executions and their
compute time; the input and output phases happen per request in the front ends, so they are
counted in `inference_stats` only (0 in `batch_stats`). Counters run from the server's start, across
a model's unload and reload.
"""

from __future__ import annotations

from collections import defaultdict

BATCH_FAMILIES = {"atoll_batch_executions": "count", "atoll_batch_compute_infer_duration_us": "us"}


def _duration(count: float, us: float) -> dict:
    return {"count": int(count), "ns": int(round(us * 1000))}


def model_statistics(families, models: list[tuple[str, str]]) -> dict:
    """Triton's statistics response for `models` ([(name, version)]) from metric families."""
    values: dict[tuple[str, str, str], float] = defaultdict(float)  # (sample, model, version); reasons summed
    batches: dict[tuple[str, str], dict[int, dict]] = defaultdict(lambda: defaultdict(dict))
    for family in families:
        for sample in family.samples:
            if sample.name.endswith("_created"):  # a single process's counters carry their birth time
                continue
            key = (sample.labels.get("model"), sample.labels.get("version"))
            if family.name in BATCH_FAMILIES:
                batches[key][int(sample.labels["batch_size"])][BATCH_FAMILIES[family.name]] = sample.value
            elif key[0] is not None:
                values[(sample.name, *key)] += sample.value
    stats = []
    for name, version in models:
        def v(sample: str) -> float:
            return values[(sample, name, version)]

        success = v("nv_inference_request_success_total")
        zero = _duration(0, 0)
        stats.append({
            "name": name, "version": version,
            "last_inference": int(v("atoll_last_inference_timestamp_ms")),
            "inference_count": int(v("nv_inference_count_total")),
            "execution_count": int(v("nv_inference_exec_count_total")),
            "inference_stats": {
                "success": _duration(success, v("nv_inference_request_duration_us_total")),
                "fail": _duration(v("nv_inference_request_failure_total"), v("atoll_inference_fail_duration_us_total")),
                "queue": _duration(success, v("nv_inference_queue_duration_us_total")),
                "compute_input": _duration(success, v("nv_inference_compute_input_duration_us_total")),
                "compute_infer": _duration(success, v("nv_inference_compute_infer_duration_us_total")),
                "compute_output": _duration(success, v("nv_inference_compute_output_duration_us_total")),
                "cache_hit": zero, "cache_miss": zero,
            },
            "response_stats": {},
            "batch_stats": [{"batch_size": size, "compute_input": zero,
                             "compute_infer": _duration(b.get("count", 0), b.get("us", 0)), "compute_output": zero}
                            for size, b in sorted(batches[(name, version)].items())],
            "memory_usage": [],
        })  # fmt: skip
    return {"model_stats": stats}
