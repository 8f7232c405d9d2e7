"""Our executors' outputs against onnxruntime's on the same inputs.

The tolerance on max|ours - ort| / max|ort| depends on the program's precision: fp32 kernels
compute in fp32 (only the summation order differs from onnxruntime); fp16 programs store every
activation and weight in fp16 (11-bit significands, ~5e-4 relative per rounding) and accumulate
in fp32, so 1e-2 leaves a margin over the zoo models' differences.
"""

from __future__ import annotations

import numpy as np

TOLERANCES = {"fp32": 1e-3, "fp16": 1e-2}


def compare(got: dict, want: dict) -> dict:
    """Per output: max abs difference and max relative difference max|a-b| / max|b|."""
    report = {}
    for name, b in want.items():
        a = got[name]
        if a.shape != b.shape:
            report[name] = {"shape": list(a.shape), "expected_shape": list(b.shape),
                            "max_abs": float("inf"), "max_rel": float("inf")}
            continue
        diff = float(np.abs(a.astype(np.float64) - b).max()) if b.size else 0.0
        scale = float(np.abs(b).max()) if b.size else 0.0
        report[name] = {"shape": list(b.shape), "max_abs": diff,
                        "max_rel": diff / scale if scale > 0 else diff}
    return report
