"""Model control between the front ends and the supervisor: what a front end asks
(`channel.Control`) and what the supervisor has every front end do (`channel.Apply`)."""

from __future__ import annotations

from dataclasses import dataclass

from atoll.repository.specs import ModelSpec

# ---- what a front end asks the supervisor (`channel.Control`) -----------------------------------


@dataclass(frozen=True)
class LoadModel:
    name: str
    parameters: dict | None = None  # Triton's load parameters: `config`, `file:<path>` (supervisor/load_request.py)


@dataclass(frozen=True)
class UnloadModel:
    name: str


@dataclass(frozen=True)
class IndexModels:
    ready: bool = False  # only the models ready to serve


# ---- what the supervisor has every front end do (`channel.Apply`) -------------------------------


@dataclass(frozen=True)
class AddModel:
    spec: ModelSpec
    arenas: dict[int, str]  # front-end index -> the model's slot arena there
    colocated: bool = False  # the front ends run its best-effort requests themselves (supervisor/colocation.py)


@dataclass(frozen=True)
class RetireModel:
    name: str
