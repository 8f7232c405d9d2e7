"""`atoll serve`: the KServe v2 / Triton-protocol HTTP and gRPC server over a model repository."""

from __future__ import annotations

import asyncio
import os
import sys

from batching import BATCHERS
from batching.profile import ProfileError
from fpga_host import BACKEND_CHOICES
from gpu_runtime.executors import EXECUTOR_CHOICES, EXECUTORS
from scheduler.policies import POLICIES

from atoll.cluster.runtime import ClusterError, serve_cluster
from atoll.commands.cluster import node_serve_args
from atoll.config import SERVE_FLAGS, ConfigError, ServerConfig, add_config_options, config_from_args
from atoll.kserve.restricted import Restrictions
from atoll.observe.log_format import LOG_FORMATS, configure_logging
from atoll.repository.demo import demo_repository
from atoll.repository.specs import RepositoryError
from atoll.supervisor.lifecycle import serve_forever
from atoll.supervisor.model_control import ModelsFailed
from atoll.supervisor.supervisor import Supervisor


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
    p.add_argument("--exit-on-error", metavar="BOOL",
                   help="true (default, as Triton's): a model that fails to load at start stops the server "
                        "(exit status 1); false: it is reported UNAVAILABLE and the others are served")
    p.add_argument("--http-restricted-api", action="append", metavar="<API>,...:<KEY>=<VALUE>",
                   help="as Triton's: HTTP requests of these APIs (health, metadata, inference, shared-memory, "
                        "model-config, model-repository, statistics, trace, logging) need header KEY: VALUE, "
                        "else 403 (repeatable; an API in one group only)")
    p.add_argument("--grpc-restricted-protocol", action="append", metavar="<PROTOCOL>,...:<KEY>=<VALUE>",
                   help="as Triton's: gRPC calls of these protocols (the same names) need metadata "
                        "triton-grpc-protocol-KEY: VALUE, else UNAVAILABLE (repeatable)")
    p.add_argument("--backend", choices=BACKEND_CHOICES, help="preprocessing backend")
    p.add_argument("--batcher", choices=tuple(BATCHERS), help="batching policy")
    p.add_argument("--executor", choices=EXECUTOR_CHOICES,
                   help="model executor in the vGPU workers (" + ", ".join(
                       n for n, s in EXECUTORS.items() if s.preemptible) + " can be preempted)")
    p.add_argument("--policy", choices=tuple(POLICIES),
                   help="how real-time batches preempt best-effort ones in a vGPU worker")
    p.add_argument("--log-format", choices=LOG_FORMATS,
                   help="plain: lines start with a timestamp; journal: none (journald adds its own) and a "
                        "syslog priority prefix (default: journal when standard error is the journal)")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="serve a Ray cluster's Atoll nodes through one endpoint here: ray://HOST:PORT, auto, "
                        "HOST:PORT (its GCS) or local:N; the other settings go to every node (docs/cluster.md)")
    add_config_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    configure_logging(args.log_format)
    try:
        config = config_from_args(args, SERVE_FLAGS)
        _check_restrictions(config.server)
        if args.cluster:
            _serve_cluster(args, config.server, config)
        else:
            asyncio.run(serve_forever(Supervisor(config)))
    except (ConfigError, RepositoryError, ProfileError, ClusterError, OSError) as exc:
        print(f"atoll serve: {exc}", file=sys.stderr)
        return 2
    except ModelsFailed as exc:  # each model's reason is logged above
        print(f"atoll serve: {exc}", file=sys.stderr)
        return 1
    return 0


def _check_restrictions(server: ServerConfig) -> None:
    """A malformed restricted-API group stops the start with its reason (the front ends parse it again)."""
    try:
        Restrictions.parse(server.http_restricted_api, server.grpc_restricted_protocol)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _serve_cluster(args, s: ServerConfig, config) -> None:
    """The endpoint here (host, ports, restricted APIs), each node's atoll serve with the rest."""
    repository = os.path.abspath(s.repository) if s.repository else str(demo_repository())
    models = [m for m in s.load_model.split(",") if m] or ["*"]
    restrictions = Restrictions.parse(s.http_restricted_api, s.grpc_restricted_protocol)
    serve_cluster(args.cluster, repository, models, node_serve_args(args, SERVE_FLAGS), config, restrictions)
