"""Which models a front end runs itself: on CPU vGPUs, a best-effort request of a plain
onnxruntime model is preprocessed and inferred on the same lane thread of the front end that
received it, batched with the requests waiting there (`front_end/colocated.py`), instead of going
to the dispatcher and a vGPU worker.

Why: where the vGPU is a CPU, the hand-offs cost more than a batch saves, and the tensor crossed
three processes' caches (the figures: docs/data-plane.md). Real-time requests keep the dispatcher's
path (REEF, admission by analysis), and so does every model whose semantics live there: sequences,
Python models, ensembles, queue policies, audio's padded buckets, BYTES and BF16 tensors, and
models run on the kernel runtime (preemptible programs).
"""

from __future__ import annotations

from batching.queue_policy import QueuePolicies
from gpu_runtime.executors import DEFAULT_EXECUTOR

from atoll.repository.specs import ModelSpec

NOT_HERE = ("BYTES", "BF16")  # carried through the slots' own encodings (pack_bytes, bf16_io)


def reason_not(spec: ModelSpec, executor: str | None, vgpu_kinds: list[str], mode: str) -> str:
    """Why the front ends must not run `spec` themselves ("" when they run its best-effort
    requests): `executor` is what its vGPUs run it on, `vgpu_kinds` the kinds of those vGPUs,
    `mode` the config's `server.colocate`."""
    if mode == "off":
        return "server.colocate is off"
    if not vgpu_kinds or any(kind != "cpu" for kind in vgpu_kinds):
        return "not every vGPU it runs on is a CPU"
    if executor != DEFAULT_EXECUTOR:
        return f"it runs on {executor}, not {DEFAULT_EXECUTOR}"
    if spec.python is not None or spec.ensemble is not None or spec.sequence is not None:
        return "a Python model, an ensemble or a stateful model"
    if spec.max_batch_size < 1:
        return "max_batch_size 0"
    if spec.preprocess not in ("none", "image"):
        return f"its {spec.preprocess} rows are padded to buckets"
    if spec.preprocess == "image" and (-1 in spec.inputs[0].model_dims or spec.inputs[0].datatype != "FP32"):
        return "its images are not FP32 tensors of one shape"
    if spec.pad_dynamic:
        return "atoll.pad_dynamic pads its rows"
    if spec.queue_policies != QueuePolicies():
        return "its queue policies are the batcher's"
    if any(t.datatype in NOT_HERE for t in spec.inputs + spec.outputs):
        return f"a {'/'.join(NOT_HERE)} tensor"
    return ""
