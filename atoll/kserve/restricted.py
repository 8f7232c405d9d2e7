"""Triton's restricted APIs (`--http-restricted-api`, `--grpc-restricted-protocol`): which endpoint
belongs to which category, and the refusal a request of a restricted category gets unless it carries
its group's header key=value. Pure and transport-independent, so the front ends' HTTP routes and gRPC
service and the cluster endpoint ask the same object; an empty one is falsy, so a server with nothing
restricted pays one truth test. Facts from Triton 2.73.0 (triton-inference-server/server e1db8a6):
docs/customization_guide/inference_protocols.md "Limit Endpoint Access", src/restricted_features.h,
src/command_line_parser.cc (ParseRestrictedFeatureOption), src/http_server.cc (RespondIfRestricted),
src/grpc/grpc_server.cc and infer_handler.cc (ExecutePrecondition).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import grpc

# Triton's category names (restricted_features.h RESTRICTED_CATEGORY_NAMES), in its order
CATEGORIES = ("health", "metadata", "inference", "shared-memory", "model-config", "model-repository",
              "statistics", "trace", "logging")  # fmt: skip
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"  # grpc_server.h kRestrictedProtocolHeaderTemplate

# HTTP: the category of /v2/<first segment>/..., and of /v2/models/<m>[/versions/<v>]/<action>
_SERVER_PATHS = {"health": "health", "repository": "model-repository", "systemsharedmemory": "shared-memory",
                 "cudasharedmemory": "shared-memory", "trace": "trace", "logging": "logging"}  # fmt: skip
_MODEL_ACTIONS = {"": "metadata", "ready": "health", "infer": "inference", "generate": "inference",
                  "generate_stream": "inference", "config": "model-config", "stats": "statistics",
                  "trace/setting": "trace"}  # fmt: skip
# gRPC: inference.GRPCInferenceService's methods (grpc_server.cc: the category each handler is given)
GRPC_CATEGORIES = {
    "ServerLive": "health", "ServerReady": "health", "ModelReady": "health",
    "ServerMetadata": "metadata", "ModelMetadata": "metadata",
    "ModelInfer": "inference", "ModelStreamInfer": "inference",
    "ModelConfig": "model-config", "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository", "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory", "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory", "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory", "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace", "LogSettings": "logging",
}  # fmt: skip


def http_category(path: str) -> str | None:
    """The category of an HTTP path (or of a route pattern: `{model}` is one segment), None for
    one outside the protocol (`/metrics`, unknown paths: never restricted, as in Triton)."""
    parts = path.split("/")
    if parts[:2] != ["", "v2"]:
        return None
    rest = parts[2:]
    if not rest:
        return "metadata"
    if rest[0] != "models":
        return _SERVER_PATHS.get(rest[0])
    if rest == ["models", "stats"]:  # Triton matches it before a model of that name
        return "statistics"
    if len(rest) < 2:
        return None
    action = rest[2:]
    if action[:1] == ["versions"] and len(action) >= 2:
        action = action[2:]
    return _MODEL_ACTIONS.get("/".join(action))


@dataclass(frozen=True)
class Rule:
    """One group's header and the value a request must carry in it. HTTP header names match in
    any case (Triton's libevhtp `evhtp_kv_find` compares with strcasecmp); gRPC metadata keys are
    lower case on the wire, so `name` is matched lower-cased there; values match exactly."""

    name: str  # as configured; gRPC ones with GRPC_HEADER_PREFIX
    value: str
    key: str = field(init=False, repr=False, compare=False)  # `name` in lower case

    def __post_init__(self):
        object.__setattr__(self, "key", self.name.lower())

    def http_refusal(self, headers: Mapping[str, str]) -> tuple[int, str] | None:
        """None, or Triton's answer (http_server.cc RespondIfRestricted: 403 and this message)."""
        found = headers.get(self.key)  # the front ends' headers are keyed in lower case
        if found is None:
            found = next((v for k, v in headers.items() if k.lower() == self.key), None)
        if found == self.value:
            return None
        return 403, f"This API is restricted, expecting header '{self.name}'"

    def grpc_refusal(self, metadata: Mapping[str, str]) -> tuple[grpc.StatusCode, str] | None:
        """None, or Triton's answer (grpc_server.cc CommonCallData::Execute, infer_handler.cc:
        UNAVAILABLE and this message)."""
        if metadata.get(self.key) == self.value:
            return None
        return grpc.StatusCode.UNAVAILABLE, f"This protocol is restricted, expecting header '{self.key}'"


class Restrictions:
    """The restricted categories of each transport, each with its `Rule`; falsy when none is."""

    def __init__(self, http: Mapping[str, Rule], grpc_rules: Mapping[str, Rule]):
        self.http = dict(http)  # category -> rule
        self.grpc = dict(grpc_rules)
        self._grpc_methods = {m: self.grpc[c] for m, c in GRPC_CATEGORIES.items() if c in self.grpc}

    @classmethod
    def none(cls) -> Restrictions:
        return cls({}, {})

    @classmethod
    def parse(cls, http_specs: Sequence[str], grpc_specs: Sequence[str]) -> Restrictions:
        """From Triton's flag values, `<category>,<category>,...:<key>=<value>` each (repeatable):
        a category may be in one group only; gRPC keys get GRPC_HEADER_PREFIX. ValueError names
        the flag and what is wrong."""
        return cls(_groups(http_specs, "http-restricted-api", "api", ""),
                   _groups(grpc_specs, "grpc-restricted-protocol", "protocol", GRPC_HEADER_PREFIX))  # fmt: skip

    def __bool__(self) -> bool:
        return bool(self.http or self.grpc)

    def http_rule(self, path: str) -> Rule | None:
        """The rule a request for `path` (or a route pattern) must satisfy, None if it is free."""
        category = http_category(path)
        return self.http.get(category) if category is not None else None

    def http_refusal(self, method: str, path: str, headers: Mapping[str, str]) -> tuple[int, str] | None:
        """None (allowed), or the status and message Triton refuses it with. Triton decides by
        path alone, before looking at the method, so `method` changes nothing."""
        rule = self.http_rule(path)
        return rule.http_refusal(headers) if rule is not None else None

    def grpc_rule(self, rpc_name: str) -> Rule | None:
        """The rule a call of method `rpc_name` ("RepositoryModelLoad") must satisfy, None if free."""
        return self._grpc_methods.get(rpc_name)

    def grpc_refusal(self, rpc_name: str, metadata: Mapping[str, str]) -> tuple[grpc.StatusCode, str] | None:
        """None (allowed), or the status code and message Triton refuses the call with."""
        rule = self.grpc_rule(rpc_name)
        return rule.grpc_refusal(metadata) if rule is not None else None


def _groups(specs: Sequence[str], flag: str, kind: str, prefix: str) -> dict[str, Rule]:
    """Category -> rule from one flag's values (Triton's ParseGenericConfigOption: split at the
    first ':', then at the first '=' after it; no part may be empty)."""
    rules: dict[str, Rule] = {}
    for spec in specs:
        categories, colon, setting = spec.partition(":")
        key, equals, value = setting.partition("=")
        if not (colon and equals and categories and key and value):
            raise ValueError(f"--{flag} option format is '<{kind}s>:<key>=<value>'; got {spec!r}")
        for category in categories.split(","):
            if category not in CATEGORIES:
                raise ValueError(f"--{flag}: unknown restricted {kind} {category!r} (known: {', '.join(CATEGORIES)})")
            if category in rules:
                raise ValueError(f"--{flag}: restricted {kind} {category!r} can not be specified in multiple groups")
            rules[category] = Rule(prefix + key, value)
    return rules
