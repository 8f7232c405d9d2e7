"""Triton's model load request parameters: `config`, a model configuration in JSON (ModelConfig's
JSON form) used instead of the folder's config.pbtxt, and `file:<path>`, a model file sent in the
request (base64 in HTTP JSON, bytes in gRPC) at `<path>` inside the model's folder, e.g.
`file:1/model.onnx`. As in Triton, files come with a `config`, and then make the whole folder: the
model is loaded from them, not from the repository. Anything else is refused.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

FILE_PREFIX = "file:"


class LoadParameterError(ValueError):
    pass


@dataclass(frozen=True)
class LoadRequest:
    config: dict | None = None  # None: the folder's config.pbtxt
    files: dict[str, bytes] = field(default_factory=dict)  # relative path -> contents

    def key(self) -> str:
        """What tells two loads of the same folder apart (the model is loaded again when it changes)."""
        return json.dumps(self.config, sort_keys=True)


def parse(parameters: dict) -> LoadRequest:
    unknown = [k for k in parameters if k != "config" and not k.startswith(FILE_PREFIX)]
    if unknown:
        raise LoadParameterError(f"unknown load parameter(s) {', '.join(map(repr, unknown))}: Triton's are "
                                 "'config' and 'file:<path>'")  # fmt: skip
    config = parameters.get("config")
    if config is not None:
        try:
            config = json.loads(config)
        except (TypeError, ValueError) as exc:
            raise LoadParameterError(f"the 'config' parameter is not valid JSON: {exc}") from None
        if not isinstance(config, dict):
            raise LoadParameterError("the 'config' parameter must be a JSON object (a model configuration)")
    files = {_relative(k[len(FILE_PREFIX):]): _contents(k, v) for k, v in parameters.items()
             if k.startswith(FILE_PREFIX)}  # fmt: skip
    if files and config is None:
        raise LoadParameterError("model files in a load request need the 'config' parameter too")
    return LoadRequest(config, files)


def _relative(path: str) -> str:
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or any(p in ("..", ".") for p in parts) or "\\" in path or "\0" in path:
        raise LoadParameterError(f"file parameter path {path[:80]!r} must be relative, inside the model's folder")
    return "/".join(parts)


def _contents(key: str, value) -> bytes:
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise LoadParameterError(f"parameter {key!r} must hold the file's bytes (base64 over HTTP)")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise LoadParameterError(f"parameter {key!r} is not base64: {exc}") from None


def write_files(files: dict[str, bytes], folder: Path) -> None:
    """The request's files under `folder` (a fresh one: the model's folder for this load)."""
    for path, data in files.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
