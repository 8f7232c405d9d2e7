"""Triton's queue policies of the dynamic batcher (`ModelQueuePolicy`), as pure decisions.

Triton's documentation (docs/user_guide/batcher.md, "Priority Levels" and "Queue Policy"; the
`ModelDynamicBatching` and `ModelQueuePolicy` messages of model_config.proto):
- `priority_levels` N makes levels 1 (highest) to N; a request that names no level (0), or one
  beyond N, takes `default_priority_level`.
- Each level's policy is its `priority_queue_policy` entry, else `default_queue_policy`.
- `max_queue_size`: a request that would find that many queued is refused at once ("Exceeds
  maximum queue size"); 0 bounds nothing.
- `default_timeout_microseconds`: how long a request may wait in the queue; 0 forever. With
  `allow_timeout_override`, a request's own `timeout` parameter replaces it, but only to shorten it.
- `timeout_action`: REJECT answers a request that waited past its timeout with an error ("Request
  timeout expired"); DELAY keeps it, behind every request of its level that has not timed out.

No clock here: callers pass the time (the dispatcher on the event loop, the simulator on its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

ACTIONS = ("REJECT", "DELAY")
QUEUE_FULL = "Exceeds maximum queue size"
TIMED_OUT = "Request timeout expired"


class QueuePolicyError(ValueError):
    pass


@dataclass(frozen=True)
class QueuePolicy:
    timeout_action: str = "REJECT"
    default_timeout_microseconds: int = 0  # 0: no timeout
    allow_timeout_override: bool = False
    max_queue_size: int = 0  # 0: unbounded

    def __post_init__(self):
        if self.timeout_action not in ACTIONS:
            raise QueuePolicyError(f"timeout_action must be one of {', '.join(ACTIONS)}, got {self.timeout_action!r}")
        if self.default_timeout_microseconds < 0 or self.max_queue_size < 0:
            raise QueuePolicyError("default_timeout_microseconds and max_queue_size must be >= 0")

    def admits(self, queued: int) -> bool:
        """Whether a request finding `queued` requests of its level queued may join them."""
        return not self.max_queue_size or queued < self.max_queue_size

    def timeout_us(self, requested_us: int = 0) -> int:
        """A request's timeout in the queue (0: none); `requested_us` its own `timeout` (0: none)."""
        default = self.default_timeout_microseconds
        if self.allow_timeout_override and requested_us and (not default or requested_us < default):
            return requested_us
        return default

    def timed_out_at(self, arrival: float, requested_us: int = 0) -> float | None:
        """When a request that arrived at `arrival` times out in the queue; None: never."""
        timeout = self.timeout_us(requested_us)
        return arrival + timeout * 1e-6 if timeout else None

    def config(self) -> dict:
        return {"timeout_action": self.timeout_action,
                "default_timeout_microseconds": str(self.default_timeout_microseconds),
                "allow_timeout_override": self.allow_timeout_override, "max_queue_size": self.max_queue_size}


@dataclass(frozen=True)
class QueuePolicies:
    """A model's priority levels and the queue policy of each."""

    priority_levels: int = 0  # 0: one level
    default_priority_level: int = 0
    default: QueuePolicy = QueuePolicy()
    per_level: Mapping[int, QueuePolicy] = field(default_factory=dict)

    def __post_init__(self):
        # without priority_levels Atoll still reads default_priority_level (1: real-time work)
        if self.priority_levels < 0 or self.default_priority_level < 0 or (
                self.priority_levels and not 1 <= self.default_priority_level <= self.priority_levels):
            raise QueuePolicyError(f"default_priority_level must lie in 1..priority_levels "
                                   f"({self.priority_levels}), got {self.default_priority_level}")  # fmt: skip
        unknown = [level for level in self.per_level if not 1 <= level <= self.priority_levels]
        if unknown:
            raise QueuePolicyError(f"priority_queue_policy names level(s) {unknown} beyond priority_levels "
                                   f"({self.priority_levels})")  # fmt: skip

    def level(self, requested: int) -> int:
        """The level a request runs at: its own, unless none (0) or beyond the levels."""
        if requested and (not self.priority_levels or requested <= self.priority_levels):
            return requested
        return self.default_priority_level

    def of(self, level: int) -> QueuePolicy:
        return self.per_level.get(level, self.default)

    def config(self) -> dict:
        """As Triton's config endpoint writes these fields of `dynamic_batching`."""
        out = {"priority_levels": str(self.priority_levels), "default_queue_policy": self.default.config()}
        if self.per_level:
            out["priority_queue_policy"] = {str(k): p.config() for k, p in sorted(self.per_level.items())}
        return out


def read_policies(batching: Mapping) -> QueuePolicies:
    """The queue policies of a config's `dynamic_batching` (pbtxt or JSON: numbers may be strings,
    a map may be a list of {key, value})."""
    try:
        per_level = batching.get("priority_queue_policy") or {}
        if isinstance(per_level, Mapping) and "key" in per_level:
            per_level = [per_level]
        if not isinstance(per_level, Mapping):  # pbtxt: repeated { key: 1 value { ... } }
            per_level = {entry["key"]: entry.get("value", {}) for entry in per_level}
        return QueuePolicies(int(batching.get("priority_levels", 0)), int(batching.get("default_priority_level", 0)),
                             _policy(batching.get("default_queue_policy") or {}),
                             {int(k): _policy(v or {}) for k, v in per_level.items()})  # fmt: skip
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        if isinstance(exc, QueuePolicyError):
            raise
        raise QueuePolicyError(f"dynamic_batching queue policy: cannot read {exc}") from None


def _policy(entry: Mapping) -> QueuePolicy:
    override = entry.get("allow_timeout_override", False)
    if not isinstance(override, bool):
        raise QueuePolicyError(f"allow_timeout_override must be true or false, got {override!r}")
    return QueuePolicy(str(entry.get("timeout_action", "REJECT")), int(entry.get("default_timeout_microseconds", 0)),
                       override, int(entry.get("max_queue_size", 0)))  # fmt: skip
