"""What `atoll serve` checks before it starts any process: a mistake in its settings is one line
naming the key (and flag) to fix, raised as `StartError` before any worker or front end exists.

The ports are not only checked but reserved here (bound, not listening, SO_REUSEPORT): every front
end then binds the same port, and nobody else can take it while the models load.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from batching.profile import ProfileError, load_profile
from fpga_host import BACKENDS
from gpu_runtime.executors import EXECUTORS, resolve_executor
from gpu_runtime.vgpu.discovery import VGpuInfo, VGpuUnavailable, discover_vgpus

from atoll.config import Config, ConfigError

PORTS = {"http": "--http-port", "grpc": "--grpc-port", "metrics": "--metrics-port"}


class StartError(ConfigError):
    """A setting `atoll serve` cannot start with; the message names the key and what is wrong."""


@dataclass
class Checked:
    repository: Path | None  # None: the built-in demo
    vgpus: list[VGpuInfo]
    executor: str  # what `auto` resolved to
    ports: dict[str, socket.socket] = field(default_factory=dict)  # "http", "grpc", "metrics" -> reserved

    def close(self) -> None:
        for sock in self.ports.values():
            sock.close()
        self.ports.clear()


def reserve_port(host: str, port: int) -> socket.socket:
    """`port` bound (without listening) with SO_REUSEPORT, so `0` becomes a real port every front end
    can bind too and nobody else takes it meanwhile. A port some process holds is refused, another
    server of this user included (SO_REUSEPORT alone would share it); one whose last connections
    are in TIME_WAIT (a restart) is not."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    if port:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def check(config: Config) -> Checked:
    """Every check, in the order a user would fix them; the ports come back reserved."""
    s = config.server
    repository = _repository(s.repository)
    vgpus = _vgpus(config)
    executor = _executor(config.vgpus.executor, vgpus)
    _backend(config.preprocessing.backend, Path(config.preprocessing.manifest))
    _profile(config.batching.profile)
    ports = _ports(s.host, {"http": s.http_port, "grpc": s.grpc_port, "metrics": s.metrics_port})
    return Checked(repository, vgpus, executor, ports)


def _profile(path: str) -> None:
    """A configured knee profile must read (the batcher loads it once the checks have passed)."""
    if path:
        try:
            load_profile(path)
        except ProfileError as exc:
            raise StartError(f"batching.profile: {exc}") from None


def _repository(path: str) -> Path | None:
    if not path:
        return None
    where = Path(path)
    if not where.exists():
        raise StartError(f"server.repository (--repository): {path} does not exist")
    if not where.is_dir():
        raise StartError(f"server.repository (--repository): {path} is not a directory")
    if not os.access(where, os.R_OK | os.X_OK):
        raise StartError(f"server.repository (--repository): {path} cannot be read by this user")
    return where


def _vgpus(config: Config) -> list[VGpuInfo]:
    v = config.vgpus
    try:
        return discover_vgpus(v.mode, v.cpu_vgpus or None, v.green_context_sms or None)
    except (VGpuUnavailable, ValueError) as exc:
        raise StartError(f"vgpus.mode: {v.mode} cannot be used here: {exc}") from None


def _executor(name: str, vgpus: list[VGpuInfo]) -> str:
    executor = resolve_executor(name, vgpus)
    if executor != name:  # `auto` picks one that works
        return executor
    try:
        EXECUTORS[name].probe()
    except Exception as exc:  # a missing or broken library: its reason is the line to show
        raise StartError(f"vgpus.executor (--executor): {name} cannot be used here: "
                         f"{type(exc).__name__}: {exc}") from None  # fmt: skip
    return executor


def _backend(name: str, manifest: Path) -> None:
    if name == "auto":  # picks one that works, the CPU path at worst
        return
    found = BACKENDS[name].probe(manifest)
    if not found.get("available", False):
        raise StartError(f"preprocessing.backend (--backend): {name} cannot be used here: "
                         f"{found.get('reason', 'not available')}")  # fmt: skip


def _ports(host: str, ports: dict[str, int]) -> dict[str, socket.socket]:
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise StartError(f"server.host (--host): cannot use {host!r}: {exc.strerror}") from None
    wanted = {name: port for name, port in ports.items() if port >= 0}  # -1: off
    taken: dict[int, str] = {}
    for name, port in wanted.items():
        if port and port in taken:
            raise StartError(f"server.{name}_port ({PORTS[name]}): {port} is server.{taken[port]}_port too")
        taken[port] = name
    reserved: dict[str, socket.socket] = {}
    for name, port in wanted.items():
        try:
            reserved[name] = reserve_port(host, port)
        except OSError as exc:
            for sock in reserved.values():
                sock.close()
            raise StartError(f"server.{name}_port ({PORTS[name]}): cannot listen on {host}:{port}: "
                             f"{exc.strerror or exc}") from None  # fmt: skip
    return reserved
