"""`atoll cluster up|status|down`: Atoll nodes on a Ray cluster, one per Ray node offering the
`atoll_node` resource (docs/cluster.md)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping

from atoll.cluster.directory import NodeAddress
from atoll.cluster.membership import start_controller, stop_controller
from atoll.cluster.runtime import LOCAL, ClusterError, cluster_status, connected, wait_for_nodes
from atoll.config import add_config_options
from atoll.repository.demo import demo_repository

# settings each node's `atoll serve` has of its own (atoll/cluster/nodes.py, serve_args)
NODE_OWN = {"server.host", "server.http_port", "server.grpc_port", "server.metrics_port", "server.repository",
            "server.load_model", "server.model_control_mode"}  # fmt: skip
ADDRESS_HELP = "ray://HOST:PORT (Ray Client), auto (the cluster `ray start` joined here) or HOST:PORT (its GCS)"


def register(subparsers) -> None:
    p = subparsers.add_parser("cluster", help="Atoll nodes on a Ray cluster: start, list, stop")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    up = sub.add_parser("up", help="start (or find) the cluster's controller and wait for its nodes")
    up.add_argument("--address", default="auto",
                    help=ADDRESS_HELP + ", or local:N (N raylets here, as long as the command runs; default auto)")
    up.add_argument("--repository",
                    help="model repository, at this path on every node (default: the built-in demo, "
                         "built here: for local:N)")  # fmt: skip
    up.add_argument("--load-model", action="append", metavar="MODEL",
                    help="a model every node loads at start (repeatable; default: all)")
    up.add_argument("--wait-s", type=float, default=600.0, help="how long to wait for every node (default 600)")
    add_config_options(up)  # --config and --set, passed to every node's atoll serve
    up.set_defaults(func=_reported(run_up))
    for action, helped, func in (("status", "list the cluster's ready nodes", run_status),
                                 ("down", "stop every node's atoll serve and the controller", run_down)):  # fmt: skip
        q = sub.add_parser(action, help=helped)
        q.add_argument("--address", default="auto", help=ADDRESS_HELP + " (default auto)")
        q.set_defaults(func=_reported(func))


def _reported(func):
    """`func(args)`, a ClusterError said in one line (exit status 1)."""

    def run(args) -> int:
        try:
            return func(args)
        except ClusterError as exc:
            print(f"atoll cluster {args.action}: {exc}", file=sys.stderr)
            return 1

    return run


def node_serve_args(args, flags: Mapping[str, str]) -> list[str]:
    """Every node's `atoll serve` settings from a command's parsed `args`: its --config and --set,
    and each of its named `flags` (attribute -> config key) given, as --set, but the node's own."""
    given = [(key, getattr(args, attr, None)) for attr, key in flags.items() if key not in NODE_OWN]
    sets = [f"{key}={','.join(v) if isinstance(v, list) else v}" for key, v in given if v is not None]
    return [*(["--config", args.config] if args.config else []), *(f"--set={s}" for s in [*args.set, *sets])]


def _existing(address: str) -> str:
    if address.startswith(LOCAL):
        raise ClusterError("a local:N cluster is reached by the address its `up` printed")
    return address


def _print_nodes(nodes: list[NodeAddress]) -> None:
    for n in nodes:
        print(f"{n.name}  http {n.http}  grpc {n.grpc or '-'}  metrics {n.metrics or '-'}", flush=True)


def run_up(args) -> int:
    repository = os.path.abspath(args.repository) if args.repository else str(demo_repository())
    with connected(args.address) as local:
        start_controller(repository, args.load_model or ["*"], node_serve_args(args, {}))
        _print_nodes(wait_for_nodes(args.wait_s, lambda ready, wanted: print(
            f"atoll cluster: {ready} of {wanted} nodes ready", file=sys.stderr, flush=True)))  # fmt: skip
        if local is not None:  # the local cluster lives as long as this command
            print(f"atoll cluster: local Ray cluster at {local.address}; Ctrl-C stops it", file=sys.stderr,
                  flush=True)  # fmt: skip
            stops = {signal.SIGINT, signal.SIGTERM}
            signal.pthread_sigmask(signal.SIG_BLOCK, stops)
            signal.sigwait(stops)
    return 0


def run_status(args) -> int:
    with connected(_existing(args.address)):
        ready, starting = cluster_status()
    _print_nodes(ready)
    for name in starting:
        print(f"{name}  starting", flush=True)
    return 0


def run_down(args) -> int:
    with connected(_existing(args.address)):
        stopped = stop_controller()
    print("atoll cluster: stopped" if stopped else "atoll cluster: none was running", file=sys.stderr)
    return 0
