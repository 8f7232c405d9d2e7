"""Knee profiles measured on a vGPU (`atoll profile`): tail latency per batch size and input
length through the real worker path, with Batch_knee / Time_knee per bucket by batching.knee."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from batching.knee import knee
from batching.profile import BucketProfile, ModelProfile, Profile, load_profile, save_profile
from gpu_runtime.executors import resolve_executor
from gpu_runtime.vgpu.discovery import discover
from gpu_runtime.vgpu.pool import WorkerPool
from tqdm import tqdm

from atoll.repository.demo import demo_repository
from atoll.repository.specs import load_repository
from atoll.supervisor import lengths

Runner = Callable[[int, float], None]  # run one batch of `batch` inputs of `length` seconds


def measure(runner: Runner, model: str, modality: str, lengths: Sequence[float],
            batches: Sequence[int], repeats: int, warmup: int, percentile: float,
            clock: Callable[[], float] = time.perf_counter, progress: bool = True):
    """A ModelProfile of tail latency (ms) per (length, batch), with knees by the knee rule."""

    points = [None] if modality == "image" else list(lengths)
    buckets = []
    with tqdm(total=len(points) * len(batches), desc=f"profile {model}", unit="point",
              file=sys.stderr, disable=not progress) as bar:
        for length in points:
            latency = {}
            for batch in batches:
                for _ in range(warmup):
                    runner(batch, 1.0 if length is None else length)
                times = []
                for _ in range(repeats):
                    start = clock()
                    runner(batch, 1.0 if length is None else length)
                    times.append((clock() - start) * 1e3)
                latency[batch] = float(np.percentile(times, percentile))
                bar.update()
            batch_knee, time_knee = knee(latency)
            buckets.append(BucketProfile(length, batch_knee, time_knee, latency))
    return ModelProfile(modality, tuple(buckets))


def profile_on_vgpu(args: argparse.Namespace, batches: list[int], lengths: list[float]) -> None:
    spec = _model_spec(args.repository, args.model)
    modality = "audio" if spec.preprocess == "audio" else "image"
    vgpus = discover(args.vgpu_mode).vgpus
    info = next((v for v in vgpus if v.id == args.vgpu), None) if args.vgpu else vgpus[0]
    if info is None:
        raise ValueError(f"no vGPU {args.vgpu!r}; found {', '.join(v.id for v in vgpus)}")
    if spec.max_batch_size and batches[-1] > spec.max_batch_size:
        raise ValueError(f"{spec.name} accepts batches up to {spec.max_batch_size} (config.pbtxt)")


    with WorkerPool([info], executor=resolve_executor(args.executor, [info])) as pool:
        pool.load_model(spec.name, spec.path, max_batch=batches[-1])
        runner = pool_runner(pool, info.id, spec)
        measured = measure(runner, spec.name, modality, lengths, batches, args.repeats,
                           args.warmup, args.percentile)

    out = Path(args.out)
    source = (f"measured by `atoll profile` on {info.name} ({info.id}), executor "
              f"{pool.executor}, p{args.percentile:g} of {args.repeats} batches per point")
    models = {}
    if out.is_file():
        previous = load_profile(out)
        if previous.kind != info.profile_kind:
            raise ValueError(f"{out} holds a profile for {previous.kind!r}, this vGPU is "
                             f"{info.profile_kind!r}: choose another --out")
        models = dict(previous.models)
    models[spec.name] = measured
    save_profile(Profile(info.profile_kind, source, models, args.percentile), out)
    print(f"wrote {out}: {spec.name} on {info.profile_kind}, Batch_knee per bucket "
          f"{[b.batch_knee for b in measured.buckets]}", file=sys.stderr)


def _model_spec(repository: str | None, model: str):
    if repository is None:
        repository = demo_repository()
    models = load_repository(repository)
    if model not in models:
        raise ValueError(f"no model {model!r} in {repository} (has {', '.join(models)})")
    return models[model]


def pool_runner(pool, vgpu_id: str, spec) -> Runner:
    tensor = spec.inputs[0]
    rng = np.random.default_rng(0)
    inputs: dict[tuple[int, float], np.ndarray] = {}  # built once per point, outside the timing

    def run_batch(batch: int, length: float) -> None:
        x = inputs.get((batch, length))
        if x is None:
            # the variable axis of an audio input is its frame axis
            dims = [lengths.frames(length) if d < 0 else d for d in tensor.dims]
            inputs.clear()
            x = inputs[(batch, length)] = rng.standard_normal((batch, *dims)).astype(np.float32)
        pool.submit(vgpu_id, spec.name, {tensor.name: x}).result()

    return run_batch
