"""JSON tensor decode, measured side by side with `json.loads` on the same bodies: MB/s of body,
the steps between two yields (what the event loop waits at most: p50, p99), and peak memory over
the body's size, less the tensor (tracemalloc; NumPy's buffers are traced too; a BYTES tensor's
size counts its elements' objects).

Run: `python -m atoll.bench.json_decode [--mb 16] [--out bench/results/json_decode.json]`.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from atoll.kserve.datatypes import DTYPES
from atoll.kserve.protocol import decoding

REPEATS = 3


def bodies(megabytes: float) -> dict[str, bytes]:
    """JSON infer bodies of about `megabytes` each: what clients send (random FP32 as Python prints
    it, a constant 0.5 as the issue's hostile client, INT64 ids, BYTES words), nested (1, n)."""
    rng = np.random.default_rng(0)
    size = int(megabytes * 1e6)
    kinds = {
        "FP32 random": ("FP32", lambda n: rng.standard_normal(n).astype(np.float32).astype(float).tolist(), 12),
        "FP32 0.5": ("FP32", lambda n: [0.5] * n, 5),
        "INT64": ("INT64", lambda n: rng.integers(-(10**9), 10**9, n).tolist(), 11),
        "BYTES": ("BYTES", lambda n: [f"w{i % 1000}" for i in range(n)], 8),
    }
    out = {}
    for label, (datatype, make, width) in kinds.items():
        n = size // width
        out[label] = json.dumps({"inputs": [{"name": "x", "datatype": datatype, "shape": [1, n], "data": [make(n)]}]},
                                separators=(",", ":")).encode()  # fmt: skip
    return out


def _ours(body: bytes, steps_s: list[float] | None = None) -> np.ndarray:
    """The tensor; each step's seconds between two yields appended to `steps_s`."""
    steps = decoding(body)
    while True:
        start = time.perf_counter()
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value.inputs[0].data
        finally:
            if steps_s is not None:
                steps_s.append(time.perf_counter() - start)


def _size(tensor: np.ndarray) -> int:
    """A tensor's bytes, its BYTES elements' objects included."""
    return tensor.nbytes + (sum(map(sys.getsizeof, tensor.reshape(-1))) if tensor.dtype == object else 0)


def _json_loads(body: bytes) -> np.ndarray:
    """What the front end did before: the whole body through json.loads, then the values to NumPy."""
    spec = json.loads(body)["inputs"][0]
    if spec["datatype"] == "BYTES":  # each string UTF-8 encoded, as the front end did
        flat = np.array(spec["data"], dtype=object).reshape(-1)
        out = np.empty(len(flat), dtype=object)
        out[:] = [str.encode(v) for v in flat]
        return out.reshape(np.shape(spec["data"]))
    return np.array(spec["data"], dtype=DTYPES[spec["datatype"]])


def _peak(fn, body: bytes) -> int:
    tracemalloc.start()
    try:
        fn(body)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def measure(body: bytes) -> dict:
    mb = len(body) / 1e6
    ours, loads, steps = [], [], []
    for _ in range(REPEATS):
        start = time.perf_counter()
        tensor = _ours(body, steps)
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        reference = _json_loads(body)
        loads.append(time.perf_counter() - start)
    same = tensor.tolist() == reference.tolist() if tensor.dtype == object else np.array_equal(tensor, reference)
    return {"body_mb": round(mb, 2), "ours_mb_s": round(mb / float(np.median(ours)), 1),
            "json_loads_mb_s": round(mb / float(np.median(loads)), 1),
            "speedup": round(float(np.median(loads) / np.median(ours)), 2),
            "step_ms_p50": round(float(np.percentile(steps, 50)) * 1e3, 2),
            "step_ms_p99": round(float(np.percentile(steps, 99)) * 1e3, 2), "steps": len(steps) // REPEATS,
            "tensor_mb": round(_size(tensor) / 1e6, 2),
            "ours_peak_less_tensor_over_body": round((_peak(_ours, body) - _size(tensor)) / len(body), 2),
            "json_loads_peak_less_tensor_over_body": round((_peak(_json_loads, body) - _size(tensor)) / len(body), 2),
            "same_tensor": bool(same)}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=16.0, help="size of each body (MB)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/json_decode.json"))
    args = parser.parse_args(argv)
    results = {label: measure(body) for label, body in bodies(args.mb).items()}
    report = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
              "repeats": REPEATS, "results": results}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for label, row in results.items():
        print(f"{label:12} {row}")
    return report


if __name__ == "__main__":
    main()
