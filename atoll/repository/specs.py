"""Model repository in Triton's layout: `<repo>/<model>/config.pbtxt`, `<repo>/<model>/<v>/model.onnx`.

Atoll's own settings are the config's `parameters`: `atoll.preprocess` (`image` or `audio`: the
model takes a BYTES input holding a JPEG / WAV file, preprocessed by the DPU; default `none`, ready
tensors only) and `atoll.raw_input` (that input's name; default the value of `atoll.preprocess`).
A folder without config.pbtxt, and a config without inputs, outputs or max_batch_size, is completed
from the ONNX graph (`completion.py`); a config that contradicts the graph is refused.
Of Triton's fields it reads `max_batch_size`, `input`/`output` (an output's `label_filename` names
class labels beside config.pbtxt; a tensor's `reshape`: the dims the model takes or gives where they
differ from the request's, a scalar's `dims: [1]` completed as `reshape: { shape: [ ] }`),
`version_policy` (`versions.py`: each served version is a `ModelSpec` of its own), and in
`dynamic_batching` (its absence too) `max_queue_delay_microseconds`, `preferred_batch_size`,
`default_priority_level` (for requests that name none; level 1 runs as real-time work, see
`atoll.front_end.rows.priority_of`), `priority_levels` and the queue policies
(`batching.queue_policy`), and `sequence_batching` (`batching.sequence`: its control and state
inputs and state outputs are the server's to fill and keep, not the requests'), and an ONNX
model's `instance_group` (`instances.py`). What each means here: docs/models.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from batching.queue_policy import QueuePolicies, QueuePolicyError, read_policies
from batching.sequence import SequenceError, SequenceSettings, read_sequence_batching

from atoll.kserve.classification import load_labels
from atoll.kserve.datatypes import DTYPES
from atoll.repository import pbtxt, versions
from atoll.repository.completion import Completed, GraphError, complete, graph_tensors
from atoll.repository.ensembles import Ensemble, EnsembleError, is_ensemble, read_ensemble
from atoll.repository.instances import InstanceGroup, InstanceGroupError, read_instance_groups
from atoll.repository.python_models import (MODEL_FILE, PythonModel, PythonModelError, is_python,
                                            read_python_model)  # fmt: skip
from atoll.repository.warmup import WarmupError, WarmupSample, read_warmups

TYPES = {
    "TYPE_BOOL": "BOOL", "TYPE_UINT8": "UINT8", "TYPE_UINT16": "UINT16", "TYPE_UINT32": "UINT32",
    "TYPE_UINT64": "UINT64", "TYPE_INT8": "INT8", "TYPE_INT16": "INT16", "TYPE_INT32": "INT32",
    "TYPE_INT64": "INT64", "TYPE_FP16": "FP16", "TYPE_BF16": "BF16", "TYPE_FP32": "FP32", "TYPE_FP64": "FP64",
    "TYPE_STRING": "BYTES",
}  # fmt: skip
PREPROCESS_KINDS = ("image", "audio", "none")
DIM_BOUND = 1024  # the default largest size of a -1 dimension in a slot row (parameter atoll.max_dim)
BYTES_ROOM = 64 * 1024  # the default bytes of a BYTES input in a slot row, length prefixes included (atoll.max_bytes)


class RepositoryError(ValueError):
    pass


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str  # protocol name, e.g. FP32
    dims: tuple[int, ...]  # without the batch dimension; -1 = variable
    label_filename: str | None = None  # outputs: class labels, one per line, beside config.pbtxt
    reshape: tuple[int, ...] | None = None  # the dims the model takes or gives, where not `dims`

    @property
    def model_dims(self) -> tuple[int, ...]:
        """The dims (without the batch dimension) of the tensor the model itself takes or gives."""
        return self.dims if self.reshape is None else self.reshape


@dataclass
class ModelSpec:
    name: str
    version: str
    path: Path  # the ONNX file of this version
    platform: str
    max_batch_size: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    preprocess: str
    raw_input: str
    parameters: dict[str, str] = field(default_factory=dict)
    max_queue_delay_microseconds: int | None = None  # None: the server's [batching] default
    preferred_batch_sizes: tuple[int, ...] = ()
    dynamic_batching: bool = True  # the config has `dynamic_batching`; without it each request runs as it comes
    default_priority_level: int = 0  # Triton: 0 = none set (best effort here)
    labels: dict[str, tuple[str, ...]] = field(default_factory=dict)  # output -> its label_filename's lines
    warmups: tuple[WarmupSample, ...] = ()  # config.pbtxt's model_warmup
    version_policy: versions.VersionPolicy = versions.VersionPolicy("latest")
    queue_policies: QueuePolicies = QueuePolicies()  # dynamic_batching's priority levels and queue policies
    python: PythonModel | None = None  # a Python-backend model (python_models.py), run by atoll.pybackend
    ensemble: Ensemble | None = None  # an ensemble (ensembles.py): its steps run by atoll.front_end.ensembles
    sequence: SequenceSettings | None = None  # sequence_batching: a stateful model
    instance_groups: tuple[InstanceGroup, ...] = ()  # an ONNX model's instance_group (none: the server's placement)

    @property
    def key(self) -> str:
        """This version's name inside the server (`versions.served_key`)."""
        return versions.served_key(self.name, self.version)

    @property
    def padded(self) -> bool:
        """Batched as the media models are: one FP32 input made by preprocessing (or sent ready),
        its variable length zero-padded to its bucket's. Any other model's slot rows hold every
        input (`row_fields`), batched with rows of equal shapes."""
        return self.preprocess != "none"

    @property
    def dim_bound(self) -> int:
        """The largest size a -1 dimension of a slot row takes: `atoll.max_dim`, else DIM_BOUND."""
        return int(self.parameters.get("atoll.max_dim", DIM_BOUND))

    @property
    def pad_dynamic(self) -> bool:
        """The config's `atoll.pad_dynamic: "true"`: zero-padding a -1 dimension of its inputs
        changes nothing of a row's outputs but their -1 dimension, which is cut back (e.g. a
        transformer whose attention mask covers the padding); its rows of other sizes then batch."""
        return self.parameters.get("atoll.pad_dynamic", "false") == "true"

    @property
    def bytes_room(self) -> int:
        """The bytes a BYTES input takes at most in a slot row: `atoll.max_bytes`, else BYTES_ROOM."""
        return int(self.parameters.get("atoll.max_bytes", BYTES_ROOM))

    def row_fields(self) -> list[tuple[str, tuple[int, ...], np.dtype]]:
        """Every input of a slot row: name, dims as the model takes it (without the batch dimension),
        dtype (object: BYTES)."""
        return [(t.name, t.model_dims, DTYPES[t.datatype]) for t in self.inputs]

    def metadata(self) -> dict:
        """Model metadata as the KServe v2 protocol returns it (batch dimension as -1)."""

        def shape(t: TensorSpec) -> list[int]:
            return ([-1] if self.max_batch_size > 0 else []) + list(t.dims)

        inputs = [{"name": t.name, "datatype": t.datatype, "shape": shape(t)} for t in self.inputs]
        if self.preprocess != "none":
            inputs.insert(0, {"name": self.raw_input, "datatype": "BYTES", "shape": [-1, 1]})
        return {
            "name": self.name,
            "versions": [self.version],
            "platform": self.platform,
            "inputs": inputs,
            "outputs": [
                {"name": t.name, "datatype": t.datatype, "shape": shape(t)} for t in self.outputs
            ],
        }

    def config(self) -> dict:
        """The model configuration as Triton's config endpoint returns it (ModelConfig in JSON).
        A model that preprocesses takes its media file or its ready tensor: both are optional."""

        def tensor(t: TensorSpec, optional: bool = False) -> dict:
            out = {"name": t.name, "data_type": _type_name(t), "dims": list(t.dims)}
            if t.reshape is not None:
                out["reshape"] = {"shape": list(t.reshape)}
            if t.label_filename:
                out["label_filename"] = t.label_filename
            return out | ({"optional": True} if optional else {})

        preprocess = self.preprocess != "none"
        raw = [tensor(TensorSpec(self.raw_input, "BYTES", (1,)), optional=True)] if preprocess else []
        batching = {"preferred_batch_size": list(self.preferred_batch_sizes),
                    "default_priority_level": self.default_priority_level, **self.queue_policies.config()}
        if self.max_queue_delay_microseconds is not None:  # else the server's [batching] default
            batching["max_queue_delay_microseconds"] = self.max_queue_delay_microseconds
        scheduling = {"dynamic_batching": batching} if self.dynamic_batching else {}
        if self.sequence is not None:
            scheduling = {"sequence_batching": self.sequence.config(_config_type)}
        return {
            "name": self.name, "platform": self.platform, "max_batch_size": self.max_batch_size,
            "input": raw + [tensor(t, optional=preprocess) for t in self.inputs],
            "output": [tensor(t) for t in self.outputs], **scheduling,
            "version_policy": self.version_policy.config(),
            "parameters": {k: {"string_value": v} for k, v in self.parameters.items()},
        } | ({"model_warmup": [w.config({t.name: _type_name(t) for t in self.inputs}) for w in self.warmups]}
             if self.warmups else {}) | ({"instance_group": [g.config(i, self.name) for i, g in
                                                            enumerate(self.instance_groups)]}
                                         if self.instance_groups else {})  # fmt: skip


def _type_name(t: TensorSpec) -> str:
    """A tensor's datatype as config.pbtxt names it (TYPE_FP32, TYPE_STRING)."""
    return _config_type(t.datatype)


def _config_type(datatype: str) -> str:
    """A protocol datatype (FP32, BYTES) as config.pbtxt names it (TYPE_FP32, TYPE_STRING)."""
    return "TYPE_" + datatype.replace("BYTES", "STRING")


def _tensors(entries, model: str, what: str) -> list[TensorSpec]:
    """The config's tensors (none listed: completed from the graph). Dims may come as strings (a
    JSON config: protobuf writes int64 as strings)."""
    out = []
    for e in pbtxt.as_list(entries):
        try:
            reshape = e.get("reshape")
            out.append(TensorSpec(e["name"], TYPES[e["data_type"]], tuple(int(d) for d in pbtxt.as_list(e["dims"])),
                                  e.get("label_filename"), None if reshape is None else
                                  tuple(int(d) for d in pbtxt.as_list((reshape or {}).get("shape")))))  # fmt: skip
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RepositoryError(f"{model}: {what} entry lacks or mis-types {exc}") from None
        t = out[-1]
        if t.reshape is not None and _elements(t.dims) != _elements(t.reshape):
            raise RepositoryError(f"{model}: {what} '{t.name}' has dims {list(t.dims)} but reshape "
                                  f"{list(t.reshape)}: they must hold as many elements")  # fmt: skip
    return out


def _elements(dims: tuple[int, ...]) -> int | None:
    """Elements of a tensor of `dims`; None (any number) where one is -1."""
    return None if -1 in dims else int(np.prod(dims, dtype=np.int64))


def _parameters(value) -> dict[str, str]:
    """`parameters` as config.pbtxt writes them (repeated {key, value}) or as a JSON config does
    (a map of key -> {string_value})."""
    if isinstance(value, dict) and "key" not in value:
        return {k: (v or {}).get("string_value", "") for k, v in value.items()}
    return {p["key"]: p.get("value", {}).get("string_value", "") for p in pbtxt.as_list(value)}


def is_model_folder(directory: Path) -> bool:
    """A folder with a config.pbtxt, or with a `<version>/model.onnx` alone (its config then
    completed from the graph)."""
    if (directory / "config.pbtxt").is_file():
        return True
    return directory.is_dir() and any(v.name.isdigit() and (v / "model.onnx").is_file() for v in directory.iterdir())


def _python_completed(name: str, cfg: dict, declared_in: list, declared_out: list) -> Completed:
    """A Python-backend model's or an ensemble's tensors are its config's: there is no graph."""
    if not declared_in or not declared_out:
        raise RepositoryError(f"{name}: the config.pbtxt of a python-backend model or an ensemble must list its "
                              "inputs and outputs")
    return Completed(int(cfg.get("max_batch_size", 0)), [(t.name, t.datatype, t.dims, t.reshape) for t in declared_in],
                     [(t.name, t.datatype, t.dims, t.reshape) for t in declared_out])  # fmt: skip


def read_config(directory: Path) -> dict:
    """`config.pbtxt` as a dict; {} where the folder has none (everything completed from the graph)."""
    config_path = directory / "config.pbtxt"
    if not config_path.exists():
        return {}
    try:
        return pbtxt.loads(config_path.read_text())
    except (OSError, pbtxt.PbtxtError) as exc:
        raise RepositoryError(f"{config_path}: {exc}") from None


def load_model(directory: Path, cfg: dict | None = None) -> ModelSpec:
    """The greatest version `load_versions` serves."""
    return load_versions(directory, cfg)[-1]


def load_versions(directory: Path, cfg: dict | None = None) -> list[ModelSpec]:
    """The versions of the model of `directory` that its `version_policy` serves, ascending, under
    `cfg` (default: its config.pbtxt, if any), each completed from and checked against its own graph."""
    if cfg is None:
        cfg = read_config(directory)
    if not isinstance(cfg, dict):
        raise RepositoryError(f"{directory.name}: a model config must be an object, got {type(cfg).__name__}")
    name = cfg.get("name", directory.name)
    if name != directory.name:
        raise RepositoryError(f"{directory / 'config.pbtxt'}: name {name!r} differs from folder {directory.name!r}")
    python, ensemble = is_python(cfg), is_ensemble(cfg)
    filename = cfg.get("default_model_filename", MODEL_FILE if python else "model.onnx")
    files = {int(p.name): p if ensemble else p / filename for p in directory.iterdir()  # an ensemble's is empty
             if p.is_dir() and p.name.isdigit() and (ensemble or (p / filename).is_file())}  # fmt: skip
    if not files:
        raise RepositoryError(f"{directory}: no <version>/{MODEL_FILE if python else 'model.onnx'} found")
    try:
        policy = versions.read_policy(cfg.get("version_policy"), name)
    except versions.VersionPolicyError as exc:
        raise RepositoryError(str(exc)) from None
    chosen = policy.select(list(files))
    if not chosen:
        raise RepositoryError(f"{name}: version_policy {policy.describe()} serves none of the versions in the "
                              f"repository ({', '.join(map(str, sorted(files)))})")  # fmt: skip
    return [_load_version(directory, cfg, name, files[v], policy) for v in chosen]


def _load_version(directory: Path, cfg: dict, name: str, path: Path, policy: versions.VersionPolicy) -> ModelSpec:
    """One version; `path` its model file (an ensemble's: its version folder)."""
    python, ensemble = is_python(cfg), is_ensemble(cfg)
    params = _parameters(cfg.get("parameters"))
    preprocess = params.get("atoll.preprocess", "none")
    if preprocess not in PREPROCESS_KINDS:
        raise RepositoryError(f"{name}: atoll.preprocess must be one of {PREPROCESS_KINDS}")
    declared_in, declared_out = _tensors(cfg.get("input"), name, "input"), _tensors(cfg.get("output"), name, "output")
    sequence = _sequence(cfg, name)
    try:
        declared_batch = int(cfg["max_batch_size"]) if "max_batch_size" in cfg else None
        graph_in, graph_out = ([], []) if python or ensemble else graph_tensors(path)
        if sequence is not None:  # the server fills its control and state inputs and keeps its states
            graph_in, graph_out = _requests_part(name, sequence, graph_in, graph_out, {t.name for t in declared_out})
        if python or ensemble:
            completed = _python_completed(name, cfg, declared_in, declared_out)
        else:
            completed = complete(name, declared_batch, [(t.name, t.datatype, t.dims, t.reshape) for t in declared_in],
                                 [(t.name, t.datatype, t.dims, t.reshape) for t in declared_out], (graph_in, graph_out))
    except (GraphError, TypeError, ValueError) as exc:
        raise RepositoryError(str(exc)) from None
    label_files = {t.name: t.label_filename for t in declared_out}
    inputs = [TensorSpec(n, d, tuple(dims), None, reshape) for n, d, dims, reshape in completed.inputs]
    outputs = [TensorSpec(n, d, tuple(dims), label_files.get(n), reshape) for n, d, dims, reshape in completed.outputs]
    try:
        labels = {t.name: load_labels(directory / t.label_filename) for t in outputs if t.label_filename}
    except OSError as exc:
        raise RepositoryError(f"{name}: label_filename: {exc}") from None
    if params.get("atoll.pad_dynamic", "false") not in ("true", "false"):
        raise RepositoryError(f"{name}: parameter atoll.pad_dynamic must be true or false")
    for key, default in (("atoll.max_dim", DIM_BOUND), ("atoll.max_bytes", BYTES_ROOM)):
        bound = params.get(key, str(default))
        if not bound.isdigit() or int(bound) < 1:
            raise RepositoryError(f"{name}: parameter {key} must be a positive integer, got {bound!r}")
    try:
        warmups = read_warmups(cfg.get("model_warmup"), name, {t.name: (_type_name(t), t.dims) for t in inputs},
                               completed.max_batch_size)  # fmt: skip
    except WarmupError as exc:
        raise RepositoryError(str(exc)) from None
    batching = cfg.get("dynamic_batching") or {}
    default_priority = batching.get("default_priority_level", 0)
    if not isinstance(default_priority, int) or default_priority < 0:
        raise RepositoryError(f"{name}: default_priority_level must be a non-negative integer")
    try:
        queue_policies = read_policies(batching)
        # a Python model's instances are its own processes (python_models.py); an ensemble has none
        groups = () if python or ensemble else read_instance_groups(cfg.get("instance_group"), name)
    except QueuePolicyError as exc:
        raise RepositoryError(f"{name}: {exc}") from None
    except InstanceGroupError as exc:
        raise RepositoryError(str(exc)) from None
    return ModelSpec(
        name=name,
        version=(path if ensemble else path.parent).name,
        path=path,
        platform=cfg.get("platform", cfg.get("backend", "onnxruntime_onnx")),
        max_batch_size=completed.max_batch_size,
        inputs=inputs,
        outputs=outputs,
        preprocess=preprocess,
        raw_input=params.get("atoll.raw_input", preprocess),
        parameters=params,
        max_queue_delay_microseconds=batching.get("max_queue_delay_microseconds"),
        preferred_batch_sizes=tuple(pbtxt.as_list(batching.get("preferred_batch_size"))),
        dynamic_batching="dynamic_batching" in cfg,
        default_priority_level=default_priority,
        labels=labels,
        warmups=warmups,
        version_policy=policy,
        queue_policies=queue_policies,
        python=_python_model(name, path, cfg, params) if python else None,
        ensemble=_ensemble(name, cfg, inputs, outputs) if ensemble else None,
        sequence=sequence,
        instance_groups=groups,
    )


def _ensemble(name: str, cfg: dict, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> Ensemble:
    try:
        return read_ensemble(name, cfg, [t.name for t in inputs], [t.name for t in outputs])
    except (EnsembleError, TypeError, ValueError) as exc:
        raise RepositoryError(str(exc)) from None


def _python_model(name: str, file: Path, cfg: dict, params: dict[str, str]) -> PythonModel:
    try:
        return read_python_model(name, file, cfg, params)
    except PythonModelError as exc:
        raise RepositoryError(str(exc)) from None


def _sequence(cfg: dict, name: str) -> SequenceSettings | None:
    """The config's `sequence_batching`, None without one."""
    if "sequence_batching" not in cfg:
        return None
    if "dynamic_batching" in cfg:
        raise RepositoryError(f"{name}: a model takes dynamic_batching or sequence_batching, not both")
    if _parameters(cfg.get("parameters")).get("atoll.preprocess", "none") != "none":
        raise RepositoryError(f"{name}: a model that preprocesses media takes no sequence_batching")
    try:
        settings = read_sequence_batching(cfg["sequence_batching"] or {}, TYPES)
    except SequenceError as exc:
        raise RepositoryError(f"{name}: {exc}") from None
    return settings


def _requests_part(name: str, sequence: SequenceSettings, graph_in: list, graph_out: list,
                   listed: set[str]) -> tuple[list, list]:
    """The graph's inputs and outputs without those the sequence batcher fills and keeps (a state
    output the config `listed` among its outputs stays: clients may ask for it), each checked
    against the graph's datatype."""
    inputs, outputs = {t.name: t for t in graph_in}, {t.name: t for t in graph_out}
    wanted = [(c.input_name, c.datatype, inputs, "input") for c in sequence.controls]
    wanted += [(s.input_name, s.datatype, inputs, "input") for s in sequence.states]
    wanted += [(s.output_name, s.datatype, outputs, "output") for s in sequence.states]
    for tensor, datatype, table, what in wanted:
        if tensor not in table:
            raise RepositoryError(f"{name}: sequence_batching {what} '{tensor}' is not in the graph, whose "
                                  f"{what}s are {', '.join(table) or 'none'}")  # fmt: skip
        if table[tensor].datatype != datatype:
            raise RepositoryError(f"{name}: sequence_batching {what} '{tensor}' is {datatype} in config.pbtxt "
                                  f"but {table[tensor].datatype} in the graph")  # fmt: skip
    filled, kept = set(sequence.model_inputs), set(sequence.state_outputs) - listed
    return [t for t in graph_in if t.name not in filled], [t for t in graph_out if t.name not in kept]


def load_repository(root: str | Path) -> dict[str, ModelSpec]:
    root = Path(root)
    if not root.is_dir():
        raise RepositoryError(f"model repository not found: {root}")
    models = {d.name: load_model(d) for d in sorted(root.iterdir()) if is_model_folder(d)}
    if not models:
        raise RepositoryError(f"{root}: no model folders (a config.pbtxt or a <version>/model.onnx)")
    return models
