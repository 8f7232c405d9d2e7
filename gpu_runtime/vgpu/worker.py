"""The vGPU worker process: one per vGPU, the same code for MIG, green contexts, GPUs and CPU.

Control messages (small tuples) arrive through a pipe from the pool; tensors arrive and leave
through shared-memory segments whose names the pool chose (see shm.py). Batches run on an engine
(`serial_engine.SerialEngine` by default; the pool may name another, e.g. the REEF scheduler in
`scheduler.vgpu_engine`), so several can be in flight and their replies may come in any order.
The receiving thread only hands work to the engine; one reply thread stores outputs and sends every
reply, so the engine's threads never wait on the pipe.

Messages from the pool:
  ("load", req, model, onnx_path, executor, max_batch)
  ("run", req, model, in_segment, in_layout, out_segment, out_capacity, priority)   "rt" or "be"
  ("forget", [segment, ...])   the pool evicted these segments: unmap them
  ("stop",)
Replies:
  ("ready", pid)
  ("fatal", reason)      the vGPU cannot be set up (e.g. its green context); the worker exits
  ("ok", req, payload)   load: the engine's description of the loaded model;
                         run: (out_layout, out_bytes, overflowed, compute_seconds)
  ("error", req, exception type name, message)
"""

from __future__ import annotations

import os
import queue
import threading


def worker_main(conn, info, engine=None) -> None:
    # The vGPU's environment (CUDA_VISIBLE_DEVICES=MIG-..., thread counts) must be in place before
    # any backend initialises CUDA or its thread pools, i.e. before any executor is imported.
    os.environ.update(info.env)
    try:
        if info.cpus and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, info.cpus)
        if info.green_context is not None:
            from gpu_runtime.vgpu import green_context as vgpu_green_context

            vgpu_green_context.activate(*info.green_context)
        if engine is None:
            from gpu_runtime.vgpu.serial_engine import SerialEngine as engine
        runner = engine(info)
    except Exception as exc:  # restarting would fail the same way: say why and stop
        conn.send(("fatal", f"{type(exc).__name__}: {exc}"))
        return

    from gpu_runtime.vgpu import shm

    attachments = shm.Attachments()
    outbox: queue.SimpleQueue = queue.SimpleQueue()
    replier = threading.Thread(target=_reply_loop, args=(conn, outbox, attachments),
                               name="vgpu-reply", daemon=True)
    replier.start()
    conn.send(("ready", os.getpid()))
    try:
        _serve(conn, runner, attachments, outbox, info)
    finally:
        runner.close()
        outbox.put(None)
        replier.join(10)


def _serve(conn, runner, attachments, outbox, info) -> None:
    from gpu_runtime.vgpu import shm

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
                outbox.put(("send", ("ok", req, runner.load(model, onnx_path, executor, max_batch))))
            elif kind == "run":
                _, _, model, in_segment, in_layout, out_segment, out_capacity, priority = message
                inputs = shm.views(attachments.buf(in_segment), in_layout)
                future = runner.run(model, inputs, priority)
                future.add_done_callback(
                    lambda f, r=(req, out_segment, out_capacity): outbox.put(("ran", f, *r)))
            else:
                raise ValueError(f"unknown message {kind!r}")
        except Exception as exc:  # reported to the caller's future; the worker keeps serving
            outbox.put(("send", ("error", req, type(exc).__name__, str(exc))))


def _reply_loop(conn, outbox: queue.SimpleQueue, attachments) -> None:
    while (item := outbox.get()) is not None:
        message = item[1] if item[0] == "send" else _run_reply(attachments, *item[1:])
        try:
            conn.send(message)
        except OSError:  # the pool is gone
            return


def _run_reply(attachments, future, req, out_segment, out_capacity) -> tuple:
    """Store a finished batch's outputs in the output segment, or in a one-off overflow segment
    `<out_segment>x` when they do not fit, and say where they are."""
    import numpy as np

    from gpu_runtime.vgpu import shm

    try:
        outputs, seconds = future.result()
        outputs = {name: np.asarray(array) for name, array in outputs.items()}
        _, size = shm.plan(outputs)
        if size <= out_capacity:
            payload = shm.store(attachments.buf(out_segment), outputs), size, False, seconds
        else:
            payload = shm.write(out_segment + "x", outputs), size, True, seconds
        return ("ok", req, payload)
    except Exception as exc:
        return ("error", req, type(exc).__name__, str(exc))
