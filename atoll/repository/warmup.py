"""Triton's `model_warmup` in config.pbtxt: samples a model runs at load, before it is served.

Each sample names a batch size, a count, and for every input its datatype, dims (no -1) and
`zero_data` or `random_data` (`input_data_file` is not read). They run after Atoll's own warm-up
(every input at its largest shape), in each input's dtype (`gpu_runtime.vgpu.worker`).
"""

from __future__ import annotations

from dataclasses import dataclass

from atoll.repository import pbtxt

KINDS = ("zero_data", "random_data")


class WarmupError(ValueError):
    pass


@dataclass(frozen=True)
class WarmupSample:
    name: str
    batch_size: int
    inputs: tuple[tuple[str, tuple[int, ...], str], ...]  # (input, dims, "zero_data" | "random_data")
    count: int = 1

    def config(self, datatypes: dict[str, str]) -> dict:
        """As Triton's config endpoint writes it (`datatypes`: input -> its TYPE_ name)."""
        inputs = {n: {"data_type": datatypes[n], "dims": list(d), k: True} for n, d, k in self.inputs}
        return {"name": self.name, "batch_size": self.batch_size, "count": self.count, "inputs": inputs}


def read_warmups(value, model: str, inputs: dict[str, tuple[str, tuple[int, ...]]],
                 max_batch_size: int) -> tuple[WarmupSample, ...]:
    """`model_warmup` entries (config.pbtxt's or a JSON config's) checked against the model's
    `inputs` ({name: (TYPE_ name, dims)}): every input given, in its datatype, dims fitting its own."""
    out = []
    for entry in pbtxt.as_list(value):
        name = str(entry.get("name", ""))
        try:
            batch, count = int(entry.get("batch_size", 1)), int(entry.get("count", 1))
        except (TypeError, ValueError):
            raise WarmupError(f"{model}: model_warmup {name!r}: batch_size and count must be integers") from None
        if not 1 <= batch <= max(max_batch_size, 1) or count < 1:
            raise WarmupError(f"{model}: model_warmup {name!r}: batch_size {batch} must be 1 to "
                              f"{max(max_batch_size, 1)}, count at least 1")  # fmt: skip
        given = entry.get("inputs")
        pairs = (given.items() if isinstance(given, dict) and "key" not in given
                 else [(e.get("key"), e.get("value", {})) for e in pbtxt.as_list(given)])  # fmt: skip
        samples = []
        for key, spec in pairs:
            samples.append(_input(model, name, key, spec, inputs))
        missing = sorted(set(inputs) - {key for key, _, _ in samples})
        if missing:
            raise WarmupError(f"{model}: model_warmup {name!r} gives no data for input(s) {', '.join(missing)}")
        out.append(WarmupSample(name, batch, tuple(samples), count))
    return tuple(out)


def _input(model: str, sample: str, key, spec: dict, inputs: dict) -> tuple[str, tuple[int, ...], str]:
    where = f"{model}: model_warmup {sample!r} input {key!r}"
    if key not in inputs:
        raise WarmupError(f"{where}: the model has no such input")
    datatype, dims = inputs[key]
    if spec.get("data_type") != datatype:
        raise WarmupError(f"{where}: data_type {spec.get('data_type')} but the input is {datatype}")
    try:
        given = tuple(int(d) for d in pbtxt.as_list(spec.get("dims")))
    except (TypeError, ValueError):
        raise WarmupError(f"{where}: dims must be integers") from None
    if len(given) != len(dims) or any(g < 1 or (d != -1 and g != d) for g, d in zip(given, dims)):
        raise WarmupError(f"{where}: dims {list(given)} do not fit the input's {list(dims)}")
    kinds = [k for k in KINDS if spec.get(k)]
    if len(kinds) != 1:
        raise WarmupError(f"{where}: give zero_data or random_data (input_data_file is not read)")
    return key, given, kinds[0]
