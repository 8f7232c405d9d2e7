"""Writes zoo models in Triton's model-repository layout: <repo>/<model>/{config.pbtxt,1/model.onnx}."""

from __future__ import annotations

from pathlib import Path

import onnx

from gpu_runtime.zoo import MODELS, ZooModel


def _dims(dims) -> str:
    return "[ " + ", ".join(str(d) for d in dims) + " ]"


def config_pbtxt(entry: ZooModel) -> str:
    params = {"atoll.preprocess": entry.kind}
    if entry.kind == "image":
        params["atoll.image_size"] = str(entry.input_dims[-1])
    else:
        params["atoll.mel_bins"] = str(entry.input_dims[0])
    lines = [
        f'name: "{entry.name}"',
        'platform: "onnxruntime_onnx"',
        f"max_batch_size: {entry.max_batch_size}",
        "input [",
        f'  {{ name: "{entry.input_name}" data_type: TYPE_FP32 dims: {_dims(entry.input_dims)} }}',
        "]",
        "output [",
        f'  {{ name: "{entry.output_name}" data_type: TYPE_FP32 dims: {_dims(entry.output_dims)} }}',
        "]",
        "dynamic_batching { }",
    ]
    for key, value in params.items():
        lines.append(f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}')
    return "\n".join(lines) + "\n"


def write_model(repo: Path, name: str, model: onnx.ModelProto) -> Path:
    entry = MODELS[name]
    version_dir = Path(repo) / name / "1"
    version_dir.mkdir(parents=True, exist_ok=True)
    (Path(repo) / name / "config.pbtxt").write_text(config_pbtxt(entry))
    path = version_dir / "model.onnx"
    onnx.save(model, str(path))
    return path
