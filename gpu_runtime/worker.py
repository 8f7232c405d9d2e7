"""The vGPU worker process: one per vGPU, the same code for MIG, green contexts, GPUs and CPU.

It runs one batch at a time. Control messages (small tuples) arrive through a pipe from the pool;
tensors arrive and leave through shared-memory segments whose names the pool chose (see shm.py).

Messages from the pool:
  ("load", req, model, onnx_path, executor, max_batch)
  ("run", req, model, in_segment, in_layout, out_segment, out_capacity)
  ("forget", [segment, ...])   the pool evicted these segments: unmap them
  ("stop",)
Replies:
  ("ready", pid)
  ("fatal", reason)      the vGPU cannot be set up (e.g. its green context); the worker exits
  ("ok", req, payload)   load: the executor's describe();
                         run: (out_layout, out_bytes, overflowed, compute_seconds)
  ("error", req, exception type name, message)
"""

from __future__ import annotations

import os
import time


def worker_main(conn, info) -> None:
    # The vGPU's environment (CUDA_VISIBLE_DEVICES=MIG-..., thread counts) must be in place before
    # any backend initialises CUDA or its thread pools, i.e. before any executor is imported.
    os.environ.update(info.env)
    try:
        if info.cpus and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, info.cpus)
        if info.green_context is not None:
            from gpu_runtime import vgpu_green_context

            vgpu_green_context.activate(*info.green_context)
    except Exception as exc:  # restarting would fail the same way: say why and stop
        conn.send(("fatal", f"{type(exc).__name__}: {exc}"))
        return

    from gpu_runtime import shm, vgpu_executors

    models = {}
    attachments = shm.Attachments()
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the pool is gone: nothing left to serve
            return
        kind = message[0]
        if kind == "stop":
            return
        if kind == "forget":
            for name in message[1]:
                attachments.forget(name)
            continue
        req = message[1]
        try:
            if kind == "load":
                _, _, model, onnx_path, executor, max_batch = message
                models[model] = vgpu_executors.loader(executor)(onnx_path, info, max_batch)
                conn.send(("ok", req, models[model].describe()))
            elif kind == "run":
                _, _, model, *segments = message
                if model not in models:
                    raise KeyError(f"model {model!r} is not loaded on {info.id}")
                conn.send(("ok", req, _run(models[model], attachments, *segments)))
            else:
                raise ValueError(f"unknown message {kind!r}")
        except Exception as exc:  # reported to the caller's future; the worker keeps serving
            conn.send(("error", req, type(exc).__name__, str(exc)))


def _run(runner, attachments, in_segment, in_layout, out_segment, out_capacity):
    """Run on zero-copy views of the input segment and store the outputs in the output segment, or
    in a one-off overflow segment `<out_segment>x` when they do not fit."""
    import numpy as np

    from gpu_runtime import shm

    start = time.perf_counter()
    outputs = runner.run(shm.views(attachments.buf(in_segment), in_layout))
    elapsed = time.perf_counter() - start
    outputs = {name: np.asarray(array) for name, array in outputs.items()}
    _, size = shm.plan(outputs)
    if size <= out_capacity:
        return shm.store(attachments.buf(out_segment), outputs), size, False, elapsed
    return shm.write(out_segment + "x", outputs), size, True, elapsed
