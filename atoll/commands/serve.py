"""`atoll serve`: the KServe v2 / Triton-protocol HTTP and gRPC server over a model repository."""

from __future__ import annotations

import sys
from pathlib import Path

from gpu_runtime.executors import EXECUTORS


def add_config_options(p) -> None:
    p.add_argument("--config", help="atoll.toml with settings (defaults for every key)")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", default=[],
                   help="override one config key, e.g. --set batching.batcher=triton (repeatable)")  # fmt: skip


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve a model repository over KServe v2 HTTP and gRPC")
    p.add_argument("--repository", help="Triton-layout model repository (default: built-in demo)")
    p.add_argument("--host", help="address to bind (default 127.0.0.1)")
    p.add_argument("--http-port", type=int, help="HTTP port (default 8000; 0 = any free port)")
    p.add_argument("--grpc-port", type=int, help="gRPC port (default 8001; 0 = any free port, -1 = off)")
    p.add_argument("--metrics-port", type=int, help="Prometheus port (default 8002; -1 = off)")
    p.add_argument("--front-ends", type=int,
                   help="front-end processes sharing the HTTP and gRPC ports (default: one per 4 cores)")
    p.add_argument("--model-control-mode", choices=("none", "explicit", "poll"),
                   help="none (default): serve every model, refuse load/unload; explicit: serve the "
                        "--load-model models, load/unload on request; poll: serve every model, "
                        "follow the repository's changes")
    p.add_argument("--load-model", action="append", metavar="MODEL",
                   help="explicit mode: a model to load at start (repeatable; * = all)")
    p.add_argument("--repository-poll-secs", type=float, help="poll mode: seconds between scans (default 15)")
    p.add_argument("--backend", choices=("auto", "xrt", "emu", "cpu"), help="preprocessing backend")
    p.add_argument("--batcher", choices=("preba", "triton", "static"), help="batching policy")
    p.add_argument("--executor", choices=("auto", *EXECUTORS),
                   help="model executor in the vGPU workers (" + ", ".join(
                       n for n, s in EXECUTORS.items() if s.preemptible) + " can be preempted)")
    p.add_argument("--policy", choices=("seq", "streams", "wait", "reset", "reef"),
                   help="how real-time batches preempt best-effort ones in a vGPU worker")
    add_config_options(p)
    p.set_defaults(func=run)


def config_from_args(args, flags: dict[str, str]):
    """Config file, then --set overrides, then the named flags (attribute -> section.key)."""
    from atoll.config import load_config, parse_set_options

    overrides = parse_set_options(args.set)
    for attr, key in flags.items():
        value = getattr(args, attr, None)
        if value is not None:
            overrides[key] = ",".join(value) if isinstance(value, list) else value
    return load_config(args.config, overrides)


SERVE_FLAGS = {
    "repository": "server.repository", "host": "server.host", "http_port": "server.http_port",
    "grpc_port": "server.grpc_port", "metrics_port": "server.metrics_port", "front_ends": "server.front_ends",
    "model_control_mode": "server.model_control_mode", "load_model": "server.load_model",
    "repository_poll_secs": "server.repository_poll_secs", "backend": "preprocessing.backend",
    "batcher": "batching.batcher", "executor": "vgpus.executor", "policy": "scheduler.policy",
}  # fmt: skip


async def serve_forever(service) -> None:
    import asyncio
    import signal

    from gpu_runtime.priority import relay_this_thread

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await service.start()
        relay_this_thread()  # the dispatcher's loop passes every row on, real-time ones among them
        print(f"atoll: serving on {service.http_url}"
              + (f" and grpc://{service.grpc_address}" if service.grpc_address else "")
              + (f" (metrics {service.metrics_url}/metrics)" if service.metrics_url else ""),
              flush=True)  # fmt: skip
        await stop.wait()
        print("atoll: shutting down", flush=True)
    finally:
        await service.stop()


def run(args) -> int:
    import asyncio
    import logging

    from batching.profile import ProfileError

    from atoll.config import ConfigError
    from atoll.repository import RepositoryError
    from atoll.service import Service

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        config = config_from_args(args, SERVE_FLAGS)
        repo = Path(config.server.repository) if config.server.repository else None
        asyncio.run(serve_forever(Service(config, repo)))
    except (ConfigError, RepositoryError, ProfileError, OSError) as exc:
        print(f"atoll serve: {exc}", file=sys.stderr)
        return 2
    return 0
