"""An ensemble's request run step by step in the front end that took it.

Each step is a request of its own to the step's model, made from the ensemble's tensors by the
step's `input_map` and run through the same path as a client's (`Endpoints.infer`): admitted,
made into that model's slot rows (a JPEG or WAV preprocessed by the DPU or the CPU path for a media
model), batched by that model's batcher with every other request of it, and counted in that
model's statistics, as Triton counts composing models. Steps whose inputs exist run at once (one
wave of the DAG at a time). A step that fails fails the request with its error, naming the step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np

from atoll.kserve.errors import ApiError
from atoll.kserve.protocol import InferRequest, Output, ProtocolError, Tensor
from atoll.repository.ensembles import Step, order
from atoll.repository.specs import ModelSpec

# infer(model, version or None, request) -> the step's outputs (Endpoints.infer, bound)
StepCall = Callable[[str, str | None, InferRequest], Awaitable[list[Output]]]


async def run_ensemble(spec: ModelSpec, request: InferRequest, infer: StepCall) -> dict[str, np.ndarray]:
    """The ensemble's outputs by name, from the tensors of `request`."""
    tensors: dict[str, Tensor] = {t.name: t for t in request.inputs}
    missing = [t.name for t in spec.inputs if t.name not in tensors]
    if missing:
        raise ProtocolError(f"ensemble {spec.name!r} needs input(s) {', '.join(missing)}")
    ensemble = spec.ensemble
    passed = {k: v for k, v in request.parameters.items() if k == "priority"}

    async def run(i: int, step: Step) -> None:
        step_request = InferRequest(request.id, [_renamed(tensors[t], name) for name, t in step.input_map],
                                    [{"name": name, "parameters": {}} for name, _ in step.output_map], passed)  # fmt: skip
        try:
            outputs = {out.name: out for out in await infer(step.model_name, step.model_version or None, step_request)}
        except ApiError as exc:
            raise ApiError(exc.code, f"ensemble '{spec.name}' step {i} (model '{step.model_name}'): "
                                     f"{exc.message}") from None  # fmt: skip
        for name, tensor in step.output_map:
            out = outputs[name]
            tensors[tensor] = Tensor(tensor, out.datatype, out.shape, out.data)

    for wave in order(ensemble, [t.name for t in spec.inputs]):
        await asyncio.gather(*(run(i, ensemble.steps[i]) for i in wave))
    return {t.name: tensors[t.name].data for t in spec.outputs}


def _renamed(tensor: Tensor, name: str) -> Tensor:
    return Tensor(name, tensor.datatype, tensor.shape, tensor.data)
