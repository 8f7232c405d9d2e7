"""Typed configuration: one TOML file (`atoll.toml`), every key with a default, CLI overrides.

Unknown sections or keys and values of the wrong type or outside their allowed set are rejected with
a `ConfigError` naming the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_type_hints

from batching import BATCHERS, DEFAULT_BATCHER
from fpga_host import BACKEND_CHOICES
from gpu_runtime.executors import EXECUTOR_CHOICES
from gpu_runtime.vgpu.discovery import MODES
from scheduler.policies import POLICIES


class ConfigError(ValueError):
    """A configuration file or override that names an unknown key or holds a bad value."""


def _choice(allowed: Sequence[str], default: str | None = None, doc: str = "") -> Any:
    """A key taking one of `allowed` (a registry's names), by default the first."""
    default = allowed[0] if default is None else default
    return field(default=default, metadata={"choices": (default, *(a for a in allowed if a != default)), "doc": doc})


def _num(default: float | int, minimum: float | int | None = None, doc: str = "") -> Any:
    return field(default=default, metadata={"min": minimum, "doc": doc})


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    http_port: int = _num(8000, 0, "KServe v2 / Triton HTTP port (0 = any free port)")
    grpc_port: int = _num(8001, -1, "KServe v2 / Triton gRPC port (0 = any free port, -1 = off)")
    front_ends: int = _num(0, 0, "front-end processes serving the HTTP and gRPC ports (0 = one per 4 cores)")
    metrics_port: int = _num(8002, -1, "Prometheus metrics port (0 = any free port, -1 = off)")
    repository: str = field(default="", metadata={"doc": "model repository (empty: built-in demo)"})
    model_control_mode: str = _choice(("none", "explicit", "poll"),
                                      doc="which models are served: all (none, poll) or those loaded on request")
    load_model: str = field(default="", metadata={"doc": "explicit mode: models loaded at start, comma-separated (* = all)"})
    repository_poll_secs: float = _num(15.0, 0.1, "poll mode: seconds between scans of the repository")
    exit_on_error: bool = field(default=True, metadata={"doc": "a model that fails to load at start stops the "
                                                               "server (false: reported, the others served)"})
    max_request_bytes: int = _num(64 << 20, 1024, "largest accepted request body (after decompression; HTTP 413)")
    max_pending_requests: int = _num(0, 0, "fixed bound on requests in flight per priority (HTTP 503; 0 = none: "
                                           "the bound follows from request_timeout_s)")
    request_timeout_s: float = _num(120.0, 0.1, "a request not answered by then gets HTTP 504; one that would "
                                                "wait more than a tenth of it is refused at once (HTTP 503)")
    body_timeout_s: float = _num(30.0, 0.1, "a request body not received by then gets HTTP 408")
    drain_s: float = _num(30.0, 0, "on a stop (SIGTERM or SIGINT) the front ends refuse new requests (HTTP 503) and "
                                   "answer those in flight for up to this long, then close every connection")
    body_memory_bytes: int = _num(0, 0, "request bodies one front end holds at once, being read or not yet answered; "
                                        "past it the largest body still arriving is cut off, or the request refused "
                                        "(HTTP 503; 0 = an eighth of the machine's memory shared among the front "
                                        "ends; never below max_request_bytes)")
    idle_timeout_s: float = _num(60.0, 0.1, "a client connection with no request in progress for this long is closed")
    max_connections: int = _num(0, 0, "client connections per front end and protocol; past it HTTP ones holding no "
                                      "whole request are closed, longest open first, and new gRPC ones refused "
                                      "(0 = half the open-file limit left after a reserve)")
    refusals_per_answer: float = _num(4.0, 0, "503s a front end sends at once per request it answers (its measured "
                                               "rate, at least 100 a second); past it each waits its turn, up to 1 s, "
                                               "so clients resending refused requests at once are slowed to it "
                                               "(0 = unpaced)")
    be_nice: int = _num(10, 0, "how much nicer best-effort threads run than real-time ones (0 = equal)")
    colocate: str = _choice(("auto", "off"), doc="auto: on CPU vGPUs, a front end runs the best-effort requests of "
                                                 "plain onnxruntime models itself, preprocessed and inferred on one "
                                                 "lane thread, batched with those waiting there (no hop to the "
                                                 "dispatcher or a vGPU worker); off: every request through the "
                                                 "dispatcher")
    colocate_wait_us: int = _num(1000, 0, "colocated models: where the lanes were busy 90 % of the last second, a "
                                          "free one that finds fewer requests waiting than its share of the most "
                                          "they held meanwhile waits up to this long for the rest, as a dynamic "
                                          "batcher's queue delay (0 = it runs what waits)")
    http_intake: str = _choice(("native", "python"), doc="a front end's HTTP infer requests: native: read and "
                                                          "answered by C threads (built with the system compiler on "
                                                          "first use; without one, python), each run on the front "
                                                          "end's event loop as before; python: all on the event loop")
    http_local_socket: bool = field(default=True, metadata={
        "doc": "also serve HTTP on an abstract Unix socket of this host (Linux), which a cluster endpoint on the "
               "same host and network namespace uses instead of TCP loopback: half the relay's CPU for 600 KB "
               "tensors (docs/cluster.md)"})
    endpoint_relay: str = _choice(("native", "python"), doc="the cluster endpoint's HTTP infer requests: native: "
                                                             "relayed by C threads (built with the system compiler "
                                                             "on first use; without one, python), each request's "
                                                             "node still chosen by the endpoint's Python; python: "
                                                             "all on the endpoint's event loop")
    endpoint_node_congestion: list[str] = field(default_factory=lambda: ["cubic", "reno"], metadata={
        "doc": "the TCP congestion control of the native relay's connections to the nodes: the first of these "
               "the kernel allows (net.ipv4.tcp_allowed_congestion_control, all of them as root; empty: the "
               "system's default). BBR, where a host defaults to it, paces every burst with a timer of its own "
               "unless the fq qdisc does: a fifth of the relay's CPU for 600 KB tensors (docs/cluster.md)"})
    http_restricted_api: list[str] = field(default_factory=list, metadata={
        "doc": "Triton's restricted APIs: '<category>,...:<header>=<value>' each; requests of those categories "
               "without the header are refused (HTTP 403). Categories: health, metadata, inference, "
               "shared-memory, model-config, model-repository, statistics, trace, logging"})
    grpc_restricted_protocol: list[str] = field(default_factory=list, metadata={
        "doc": "the same for gRPC: the metadata key is triton-grpc-protocol-<header> (refused: UNAVAILABLE)"})
    rt_fifo: int = _num(1, 0, "SCHED_FIFO priority (1-98) of the threads relaying requests between the server's "
                              "processes, real-time lanes one above, where the OS permits it (root or CAP_SYS_NICE; "
                              "0 = off: they run as ordinary threads)")

    def pending_share(self, front_ends: int) -> int:
        """One front end's part of `max_pending_requests` (rounded up; 0 stays 0: no fixed bound)."""
        return -(-self.max_pending_requests // front_ends)


@dataclass
class PreprocessingConfig:
    backend: str = _choice(BACKEND_CHOICES, doc="DPU backend")
    cpu_threads: int = _num(0, 0, "best-effort CPU preprocessing threads per front end (0 = cores / front ends)")
    pin_threads: bool = field(default=True, metadata={"doc": "CPU backend: each best-effort preprocessing thread "
                                                             "stays on one core of its front end's share (false: "
                                                             "where the OS places it)"})
    image_cus: int = _num(4, 1, "image_cu compute units (emulated XRT)")
    audio_mel_cus: int = _num(2, 1, "audio_mel_cu compute units (emulated XRT)")
    audio_norm_cus: int = _num(2, 1, "audio_norm_cu compute units (emulated XRT)")
    manifest: str = field(default="bitstreams/atoll_dpu.json", metadata={"doc": "DPU manifest"})
    cu_timeout_ms: int = _num(2000, 1, "a CU run longer than this is failed over to the CPU")
    max_image_dim: int = _num(8192, 16, "larger images are refused as TOO_LARGE (from the header, before decoding)")
    max_request_pixels: int = _num(1 << 26, 1, "decoded pixels of all a request's images together")
    max_jpeg_scans: int = _num(64, 1, "JPEGs of more scans are refused (from the markers, before decoding): each "
                                      "progressive scan is a pass over the whole image; encoders write up to ~10")
    resize_short: int = _num(256, 1, "shorter side after resize")
    crop: int = _num(224, 1, "centre crop size")
    fp16: bool = False
    max_audio_seconds: float = _num(30.0, 0.1, "longer clips are refused")
    max_request_audio_seconds: float = _num(120.0, 0.1, "seconds of all a request's clips together")


@dataclass
class BatchingConfig:
    batcher: str = _choice(tuple(BATCHERS), DEFAULT_BATCHER, doc="batching policy")
    profile: str = field(default="", metadata={"doc": "knee profile JSON (empty: measured/default)"})
    max_batch_size: int = _num(0, 0, "Batch_max when no profile gives one (0 = 4 on CPU vGPUs, 8 on GPUs)")
    max_queue_delay_microseconds: int = _num(5000, 0, "Time_queue when no profile gives one")


@dataclass
class SchedulerConfig:
    policy: str = _choice(tuple(POLICIES), "reset",
                          doc="preemption policy in each vGPU worker (preemptible executors)")
    outstanding_kernels: int = _num(4, 1, "c: kernels in flight per best-effort stream")


@dataclass
class VGpuConfig:
    mode: str = _choice(MODES, doc="which vGPUs to use")
    cpu_vgpus: int = _num(0, 0, "CPU vGPUs (0 = one per two cores)")
    executor: str = _choice(EXECUTOR_CHOICES, doc="model executor")
    green_context_sms: int = _num(0, 0, "split whole GPUs into partitions of this many SMs (0 = off)")


@dataclass
class ResidencyConfig:
    budget_mb: float = _num(0.0, 0, "model memory each vGPU holds at once (numpy: weights; cuda-emu and "
                                    "cupy: weights and arenas, a GPU's at most its memory); the others wait "
                                    "in host memory and are switched in on demand (0 = off: docs/residency.md)")
    bandwidth_gb_s: float = _num(12.0, 0, "the host-to-vGPU link a switch on a CPU vGPU is timed at "
                                          "(12 = PCIe 3 x16 as measured; 0 = the memcpy as it runs)")
    pinned_models: list[str] = field(default_factory=list, metadata={"doc": "models never evicted"})
    evict_real_time: bool = field(default=False, metadata={"doc": "whether models that ran real-time "
                                                                  "requests may be evicted"})


@dataclass
class Config:
    server: ServerConfig = field(default_factory=ServerConfig)
    preprocessing: PreprocessingConfig = field(default_factory=PreprocessingConfig)
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    vgpus: VGpuConfig = field(default_factory=VGpuConfig)
    residency: ResidencyConfig = field(default_factory=ResidencyConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return dataclasses.asdict(self)


def _coerce(key: str, value: Any, kind: type, meta: dict) -> Any:
    if kind is bool:
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            value = value.lower() in ("true", "1", "yes")
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
    elif kind in (int, float):
        if isinstance(value, str):
            try:
                value = kind(value)
            except ValueError:
                raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        if kind is int and float(value) != int(value):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        value = kind(value)
        if meta.get("min") is not None and value < meta["min"]:
            raise ConfigError(f"{key}: must be >= {meta['min']}, got {value!r}")
    elif kind == list[str]:
        value = [value] if isinstance(value, str) else value  # one item from --set
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: expected a list of strings, got {value!r}")
    elif kind is str:
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = ",".join(value)  # a repeated flag (--load-model a --load-model b)
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        choices = meta.get("choices")
        if choices and value not in choices:
            raise ConfigError(f"{key}: must be one of {', '.join(choices)}; got {value!r}")
    return value


def _apply(config: Config, section: str, key: str, value: Any) -> None:
    sections = {f.name: f for f in dataclasses.fields(Config)}
    if section not in sections:
        raise ConfigError(f"unknown section [{section}] (known: {', '.join(sections)})")
    target = getattr(config, section)
    fields = {f.name: f for f in dataclasses.fields(target)}
    if key not in fields:
        raise ConfigError(f"unknown key {section}.{key} (known: {', '.join(fields)})")
    kind = get_type_hints(type(target))[key]
    setattr(target, key, _coerce(f"{section}.{key}", value, kind, fields[key].metadata))


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Defaults, then the TOML file (if any), then overrides given as {"section.key": value}."""
    config = Config()
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        for section, values in data.items():
            if not isinstance(values, dict):
                raise ConfigError(f"{section}: expected a [{section}] table")
            for key, value in values.items():
                _apply(config, section, key, value)
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        if not key:
            raise ConfigError(f"override {dotted!r}: expected section.key")
        _apply(config, section, key, value)
    return config


def parse_set_options(items: list[str] | None) -> dict[str, str]:
    """`--set section.key=value` options as an overrides dict."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected section.key=value")
        out[key.strip()] = value.strip()
    return out


def render_toml(config: Config) -> str:
    """The configuration as a commented TOML file (used by `atoll config --defaults`)."""
    lines = []
    for section in dataclasses.fields(Config):
        obj = getattr(config, section.name)
        lines.append(f"[{section.name}]")
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            text = str(value).lower() if isinstance(value, bool) else repr(value).replace("'", '"')
            doc = f.metadata.get("doc", "")
            choices = f.metadata.get("choices")
            if choices:
                doc = f"{doc} ({' | '.join(choices)})".strip()
            lines.append(f"{f.name} = {text}" + (f"  # {doc}" if doc else ""))
        lines.append("")
    return "\n".join(lines)


# ---- the command line's settings: a config file, --set overrides, then named flags ------------


def add_config_options(p) -> None:
    p.add_argument("--config", help="atoll.toml with settings (defaults for every key)")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", default=[],
                   help="override one config key, e.g. --set batching.batcher=triton (repeatable)")  # fmt: skip


def config_from_args(args, flags: dict[str, str]):
    """Config file, then --set overrides, then the named flags (attribute -> section.key)."""
    overrides = parse_set_options(args.set)
    for attr, key in flags.items():
        value = getattr(args, attr, None)
        if value is not None:
            overrides[key] = value
    return load_config(args.config, overrides)


SERVE_FLAGS = {
    "repository": "server.repository", "host": "server.host", "http_port": "server.http_port",
    "grpc_port": "server.grpc_port", "metrics_port": "server.metrics_port", "front_ends": "server.front_ends",
    "model_control_mode": "server.model_control_mode", "load_model": "server.load_model",
    "repository_poll_secs": "server.repository_poll_secs", "exit_on_error": "server.exit_on_error",
    "http_restricted_api": "server.http_restricted_api", "grpc_restricted_protocol": "server.grpc_restricted_protocol",
    "backend": "preprocessing.backend",
    "batcher": "batching.batcher", "executor": "vgpus.executor", "policy": "scheduler.policy",
}  # fmt: skip
