"""Which versions of a model are served, and which one a request reaches, as Triton decides.

Triton's `version_policy` (docs/user_guide/model_configuration.md, "Version Policy"): `latest
{ num_versions: n }` serves the n numerically greatest versions, `all` every version in the
repository, `specific { versions: [...] }` those listed; none given is `latest` with n = 1. A
request that names no version reaches the greatest version served (Triton's choice "based on the
model and internal policy", docs/protocol: the KServe `model_version` field). Every served version
runs as a model of its own inside the server, named by `served_key`.
"""

from __future__ import annotations

from dataclasses import dataclass

from atoll.repository import pbtxt


class VersionPolicyError(ValueError):
    pass


def served_key(name: str, version: str) -> str:
    """How the server's parts (slots, dispatcher, batcher, vGPU workers) name one served version.
    A model name holds no `/`; a version is digits: so `name/version` names one version only."""
    return f"{name}/{version}"


def model_of(key: str) -> str:
    """The model name of a `served_key` (a plain name is its own)."""
    return key.split("/", 1)[0]


@dataclass(frozen=True)
class VersionPolicy:
    kind: str  # latest, all or specific
    num_versions: int = 1  # latest
    versions: tuple[int, ...] = ()  # specific

    def select(self, available: list[int]) -> list[int]:
        """The versions served out of those in the repository, ascending."""
        available = sorted(available)
        if self.kind == "all":
            return available
        if self.kind == "specific":
            return [v for v in available if v in self.versions]
        return available[-self.num_versions:]

    def describe(self) -> str:
        if self.kind == "specific":
            return f"specific {{ versions: {list(self.versions)} }}"
        return "all { }" if self.kind == "all" else f"latest {{ num_versions: {self.num_versions} }}"

    def config(self) -> dict:
        """As Triton's config endpoint writes it (ModelVersionPolicy in JSON)."""
        if self.kind == "specific":
            return {"specific": {"versions": [str(v) for v in self.versions]}}
        return {"all": {}} if self.kind == "all" else {"latest": {"num_versions": self.num_versions}}


def read_policy(value, model: str) -> VersionPolicy:
    """config.pbtxt's `version_policy` (or a JSON config's; int64 versions may come as strings)."""
    if value is None:
        return VersionPolicy("latest")
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in ("latest", "all", "specific"):
        raise VersionPolicyError(f"{model}: version_policy must be one of latest {{ num_versions: n }}, all {{ }} "
                                 f"or specific {{ versions: [...] }}, got {value!r}")  # fmt: skip
    kind, body = next(iter(value.items()))
    body = body or {}
    try:
        if kind == "latest":
            n = int(body.get("num_versions", 1))
            if n < 1:
                raise ValueError
            return VersionPolicy("latest", num_versions=n)
        if kind == "specific":
            versions = tuple(int(v) for v in pbtxt.as_list(body.get("versions")))
            if not versions or min(versions) < 0:
                raise ValueError
            return VersionPolicy("specific", versions=versions)
    except (TypeError, ValueError, AttributeError):
        raise VersionPolicyError(f"{model}: version_policy {kind} needs "
                                 + ("num_versions >= 1" if kind == "latest" else "versions: a list of version numbers")
                                 ) from None  # fmt: skip
    return VersionPolicy("all")


def pick(versions: dict[str, object], version: str | None):
    """The served version a request reaches: the one it names, else the greatest; None if absent."""
    if not versions:
        return None
    if version in (None, ""):
        return versions[max(versions, key=int)]
    return versions.get(version)
