"""Wiring of one server process: repository, DPU preprocessor, vGPU workers, batcher, HTTP.

`Service.start()` brings everything up in dependency order and `stop()` takes it down in reverse,
so every worker process and shared-memory segment is released on shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from aiohttp import web

from atoll.config import Config
from atoll.latency_model import LatencyModel
from atoll.metrics import Metrics
from atoll.pipeline import Pipeline
from atoll.repository import ModelSpec, load_repository
from atoll.server import InferenceServer

log = logging.getLogger("atoll.service")


def _clamped(policy, max_batch: int):
    """A profiled policy with Batch_max capped at the model's own max_batch_size."""
    from batching import BucketPolicy, ModelBatching

    buckets = tuple(BucketPolicy(b.max_length, min(b.batch_max, max_batch), b.time_knee)
                    for b in policy.buckets)  # fmt: skip
    return ModelBatching(policy.modality, buckets, policy.vgpus)


def preba_policies(config: Config, models: dict[str, ModelSpec], profile=None):
    """PREBA bucket policies per model. From the knee profile where it has the model (Batch_max =
    Batch_knee, Time_knee per bucket); otherwise Batch_max and Time_knee from the model's config (or
    the [batching] defaults) for every bucket, audio bucketed by 2.5 s up to the longest clip."""
    from batching import BucketPolicy, ModelBatching, audio_bucket_edges, image_model

    b = config.batching
    policies = {}
    for name, spec in models.items():
        batch_max = min(b.max_batch_size, max(spec.max_batch_size, 1))
        if profile is not None and name in profile.models:
            policies[name] = _clamped(profile.model_batching(name), max(spec.max_batch_size, 1))
            continue
        delay_us = spec.max_queue_delay_microseconds or b.max_queue_delay_microseconds
        time_knee = max(delay_us, 1) * 1e-6
        if spec.preprocess == "audio":
            edges = audio_bucket_edges(config.preprocessing.max_audio_seconds)
            buckets = tuple(BucketPolicy(edge, batch_max, time_knee) for edge in edges)
            policies[name] = ModelBatching("audio", buckets)
        else:
            policies[name] = image_model(batch_max, time_knee)
    return policies


def make_batcher(config: Config, models: dict[str, ModelSpec], vgpus: dict[str, str], latency):
    """The configured batching policy over the given vGPUs ({id: profile kind}). Service times come
    from the knee profile (`batching.profile`) where it covers a model, else from measured batches."""
    from batching import PrebaBatcher, StaticBatcher, TritonBatcher, TritonConfig
    from batching.profile import load_profile

    b = config.batching
    profile = load_profile(b.profile) if b.profile else None
    if profile is not None and profile.kind not in vgpus.values():
        log.warning("profile %s is for %r vGPUs; serving on %s", b.profile, profile.kind,
                    sorted(set(vgpus.values())))  # fmt: skip

    def service_time(model: str, batch: int, length: float, kind: str) -> float:
        if profile is not None and model in profile.models:
            return profile.service_time(model, batch, length)
        return latency(model, batch, length, kind)

    if b.batcher == "preba":
        return PrebaBatcher(preba_policies(config, models, profile), vgpus, service_time)
    if b.batcher == "static":
        return StaticBatcher(vgpus, service_time, b.max_batch_size,
                             timeout=b.max_queue_delay_microseconds * 1e-6)  # fmt: skip
    per_model = {
        name: TritonConfig(
            max_batch_size=min(b.max_batch_size, max(spec.max_batch_size, 1)),
            max_queue_delay_microseconds=spec.max_queue_delay_microseconds
            if spec.max_queue_delay_microseconds is not None
            else b.max_queue_delay_microseconds,
            preferred_batch_sizes=tuple(p for p in spec.preferred_batch_sizes if p <= b.max_batch_size),
        )
        for name, spec in models.items()
    }
    return TritonBatcher(vgpus, service_time, b.max_batch_size, b.max_queue_delay_microseconds,
                         per_model=per_model)  # fmt: skip


class Service:
    def __init__(self, config: Config, repository: Path | None = None, progress: bool = True):
        self.config = config
        self.repository = repository
        self.progress = progress
        self.metrics = Metrics()
        self.preprocessor = None
        self.pool = None
        self.pipeline: Pipeline | None = None
        self.server: InferenceServer | None = None
        self._runners: list[web.AppRunner] = []
        self.http_url = ""
        self.metrics_url = ""

    async def start(self) -> None:
        from fpga_host.preprocessor import Preprocessor
        from gpu_runtime.vgpu.discovery import discover_vgpus
        from gpu_runtime.vgpu.pool import WorkerPool

        c = self.config
        if self.repository is None:
            from atoll.demo_repository import demo_repository

            self.repository = await asyncio.to_thread(demo_repository, progress=self.progress)
        models = load_repository(self.repository)
        p = c.preprocessing
        self.preprocessor = Preprocessor(
            p.backend, cpu_workers=p.cpu_workers or None, image_cus=p.image_cus,
            audio_mel_cus=p.audio_mel_cus, audio_norm_cus=p.audio_norm_cus, manifest=p.manifest,
            cu_timeout_s=p.cu_timeout_ms / 1000, max_image_dim=p.max_image_dim,
            resize_short=p.resize_short, crop=p.crop, fp16=p.fp16,
            max_audio_seconds=p.max_audio_seconds)  # fmt: skip
        # worker start-up and librosa's first-call compilation must not land on the first clients
        await asyncio.gather(*(asyncio.wrap_future(f) for f in self.preprocessor.warming()))
        vgpus = discover_vgpus(c.vgpus.mode, c.vgpus.cpu_vgpus or None, c.vgpus.green_context_sms or None)
        executor = c.vgpus.executor
        if executor == "auto":  # our guarded CUDA kernels on GPUs, onnxruntime on CPU vGPUs
            from gpu_runtime.executors import probe_executors

            on_gpu = any(v.kind != "cpu" for v in vgpus)
            executor = "cupy" if on_gpu and probe_executors()["cupy"]["available"] else "onnxruntime"
        from scheduler.vgpu_engine import engine_for

        # Every worker schedules its batches with REEF (`[scheduler]`) where the executor can be
        # preempted (numpy, cupy); onnxruntime models run one batch at a time there, RT first.
        s = c.scheduler
        self.pool = WorkerPool(vgpus, executor=executor, engine=engine_for(s.policy, s.outstanding_kernels))
        for name, spec in models.items():
            log.info("loading %s on %d vGPU(s)", name, len(vgpus))
            await asyncio.to_thread(self.pool.load_model, name, spec.path, None, spec.max_batch_size)
        latency = LatencyModel()
        kinds = {v.id: v.profile_kind for v in vgpus}
        batcher = make_batcher(c, models, kinds, latency)
        self.pipeline = Pipeline(models, self.preprocessor, self.pool, batcher, self.metrics,
                                 latency, kinds)  # fmt: skip
        await self.pipeline.start()
        self.server = InferenceServer(self.pipeline, models, self.metrics, c.server.max_pending_requests,
                                      c.server.request_timeout_s)  # fmt: skip
        app = self.server.app(c.server.max_request_bytes)
        self.http_url = await self._listen(app, c.server.host, c.server.http_port)
        if c.server.metrics_port >= 0:
            metrics_app = web.Application()
            metrics_app.router.add_get("/metrics", self.server.metrics_text)
            self.metrics_url = await self._listen(metrics_app, c.server.host, c.server.metrics_port)
        self.server.ready = True

    async def _listen(self, app: web.Application, host: str, port: int) -> str:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        self._runners.append(runner)
        bound = runner.addresses[0][1]
        return f"http://{host}:{bound}"

    async def stop(self) -> None:
        if self.server:
            self.server.ready = False
        for runner in reversed(self._runners):
            await runner.cleanup()
        if self.pipeline:
            await self.pipeline.stop()
        if self.pool:
            await asyncio.to_thread(self.pool.close)
        if self.preprocessor:
            await asyncio.to_thread(self.preprocessor.close)
