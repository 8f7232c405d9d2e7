"""The vGPU worker process: one per vGPU, the same code for MIG, green contexts, GPUs and CPU.

It runs one batch at a time. Control messages (small tuples) arrive through a pipe from the pool;
tensors arrive and leave through shared-memory segments whose names the pool chose (see shm.py).

Messages from the pool:
  ("load", req, model, onnx_path, executor, max_batch)
  ("run", req, model, in_segment, in_layout, out_segment)
  ("stop",)
Replies:
  ("ready", pid)
  ("ok", req, payload)   load: the executor's describe(); run: (out_layout, compute_seconds)
  ("error", req, exception type name, message)
"""

from __future__ import annotations

import os
import time


def worker_main(conn, info) -> None:
    # The vGPU's environment (CUDA_VISIBLE_DEVICES=MIG-..., thread counts) must be in place before
    # any backend initialises CUDA or its thread pools, i.e. before any executor is imported.
    os.environ.update(info.env)
    if info.cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, info.cpus)
    if info.green_context is not None:
        from gpu_runtime import vgpu_green_context

        vgpu_green_context.activate(*info.green_context)

    from gpu_runtime import vgpu_executors

    models = {}
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the pool is gone: nothing left to serve
            return
        kind = message[0]
        if kind == "stop":
            return
        req = message[1]
        try:
            if kind == "load":
                _, _, model, onnx_path, executor, max_batch = message
                models[model] = vgpu_executors.loader(executor)(onnx_path, info, max_batch)
                conn.send(("ok", req, models[model].describe()))
            elif kind == "run":
                _, _, model, in_segment, in_layout, out_segment = message
                if model not in models:
                    raise KeyError(f"model {model!r} is not loaded on {info.id}")
                conn.send(("ok", req, _run(models[model], in_segment, in_layout, out_segment)))
            else:
                raise ValueError(f"unknown message {kind!r}")
        except Exception as exc:  # reported to the caller's future; the worker keeps serving
            conn.send(("error", req, type(exc).__name__, str(exc)))


def _run(runner, in_segment, in_layout, out_segment):
    """Run on zero-copy views of the input segment, write the output segment; returns
    (out_layout, compute seconds)."""
    from gpu_runtime import shm

    start = time.perf_counter()
    with shm.Mapped(in_segment, in_layout) as inputs:
        outputs = runner.run(inputs)
        elapsed = time.perf_counter() - start
        out_layout = shm.write(out_segment, outputs)
        del inputs, outputs  # release the views so the mapping can close
    return out_layout, elapsed
