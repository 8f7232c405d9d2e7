"""Ensembles in a repository: `platform: "ensemble"` and its `ensemble_scheduling` steps.

Triton's ensemble models (https://github.com/triton-inference-server/server/blob/main/docs/user_guide/architecture.md#ensemble-models):
the config names the ensemble's inputs and outputs and its steps, each a composing model
(`model_name`, `model_version`: -1 the greatest version served) with an `input_map` (the model's input -> an ensemble
tensor) and an `output_map` (the model's output -> an ensemble tensor). The folder has an empty
version folder and no model file. A step runs once every tensor it reads exists; the steps must
form a DAG in which every ensemble output is made and every tensor read is an ensemble input or
made by exactly one step.
"""

from __future__ import annotations

from dataclasses import dataclass

from atoll.repository import pbtxt
from atoll.repository.versions import model_of


class EnsembleError(ValueError):
    pass


@dataclass(frozen=True)
class Step:
    model_name: str
    model_version: str  # "" for the greatest version served (-1)
    input_map: tuple[tuple[str, str], ...]  # (the model's input, the ensemble tensor it reads)
    output_map: tuple[tuple[str, str], ...]  # (the model's output, the ensemble tensor it makes)


@dataclass(frozen=True)
class Ensemble:
    steps: tuple[Step, ...]

    def ready(self, served: set[str]) -> bool:
        """Whether every step's model is among the `served` versions (`versions.served_key`s); a
        step naming no version takes any."""
        return all(any(model_of(key) == step.model_name and (not step.model_version or key.endswith(
            f"/{step.model_version}")) for key in served) for step in self.steps)  # fmt: skip


def is_ensemble(cfg: dict) -> bool:
    return cfg.get("platform") == "ensemble"


def _map(value, model: str, which: str) -> tuple[tuple[str, str], ...]:
    """A map as config.pbtxt writes it (repeated {key, value}) or as a JSON config does (an object)."""
    if isinstance(value, dict) and "key" not in value:
        return tuple(value.items())
    try:
        return tuple((entry["key"], entry["value"]) for entry in pbtxt.as_list(value))
    except (KeyError, TypeError):
        raise EnsembleError(f"{model}: a step's {which} must be key/value pairs") from None


def read_ensemble(name: str, cfg: dict, inputs: list[str], outputs: list[str]) -> Ensemble:
    """The config's steps, checked to form a DAG from `inputs` to every one of `outputs`."""
    entries = pbtxt.as_list((cfg.get("ensemble_scheduling") or {}).get("step"))
    if not entries:
        raise EnsembleError(f"{name}: an ensemble needs ensemble_scheduling with at least one step")
    steps = []
    for entry in entries:
        if not isinstance(entry, dict) or not entry.get("model_name"):
            raise EnsembleError(f"{name}: every ensemble step needs a model_name")
        version = int(entry.get("model_version", -1))
        steps.append(Step(entry["model_name"], "" if version < 0 else str(version),
                          _map(entry.get("input_map"), name, "input_map"),
                          _map(entry.get("output_map"), name, "output_map")))  # fmt: skip
    made = {}
    for i, step in enumerate(steps):
        for _, tensor in step.output_map:
            if tensor in made or tensor in inputs:
                raise EnsembleError(f"{name}: ensemble tensor {tensor!r} is made twice (step {i}, model "
                                    f"{step.model_name!r})")  # fmt: skip
            made[tensor] = i
    for i, step in enumerate(steps):
        unknown = [t for _, t in step.input_map if t not in made and t not in inputs]
        if unknown:
            raise EnsembleError(f"{name}: step {i} (model {step.model_name!r}) reads {', '.join(unknown)}, which "
                                "no step makes and the ensemble does not take")  # fmt: skip
    missing = [t for t in outputs if t not in made]
    if missing:
        raise EnsembleError(f"{name}: no step makes ensemble output(s) {', '.join(missing)}")
    order(Ensemble(tuple(steps)), inputs, name)
    return Ensemble(tuple(steps))


def order(ensemble: Ensemble, inputs: list[str], name: str = "") -> list[list[int]]:
    """The steps in waves: each wave's steps read only what the ensemble takes and earlier waves
    make (they may run at once). EnsembleError where steps wait on each other in a cycle."""
    have, left, waves = set(inputs), list(range(len(ensemble.steps))), []
    while left:
        wave = [i for i in left if all(t in have for _, t in ensemble.steps[i].input_map)]
        if not wave:
            raise EnsembleError(f"{name}: steps {left} wait on each other in a cycle")
        waves.append(wave)
        have.update(t for i in wave for _, t in ensemble.steps[i].output_map)
        left = [i for i in left if i not in wave]
    return waves
