"""Declared real-time models' worst-case response bounds, as the front ends show them: the
supervisor's admission test (supervisor/rt_admission.py) computes them, and every admission or
removal may move the others' bounds, so it sends them all to every front end (`channel.Apply`),
whose config answers then carry each model's in its `parameters` (`atoll.rt.bound_ms`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from atoll.repository.specs import ModelSpec

BOUND_PARAM = "atoll.rt.bound_ms"


@dataclass(frozen=True)
class RtBounds:
    bounds_ms: dict[str, float]  # model name -> its bound now; a model not here has none

    def applied(self, spec: ModelSpec) -> ModelSpec:
        """`spec` with its bound in its parameters (or none, if it has none now)."""
        parameters = {k: v for k, v in spec.parameters.items() if k != BOUND_PARAM}
        if spec.name in self.bounds_ms:
            parameters[BOUND_PARAM] = f"{self.bounds_ms[spec.name]:.3f}"
        return spec if parameters == spec.parameters else replace(spec, parameters=parameters)
