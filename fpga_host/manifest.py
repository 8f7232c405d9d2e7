"""The DPU manifest (`bitstreams/atoll_dpu.json`): kernels, their CU names and argument lists.

It is what lets one driver set kernel arguments by name on real XRT and on the emulation, and what
the emulation uses to give ctypes the C signature of each kernel (hls/ABI_DPU.md).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MANIFEST = Path(__file__).resolve().parent.parent / "bitstreams" / "atoll_dpu.json"
ARG_KINDS = ("bo", "u32", "f32")
BO_DIRS = ("in", "out", "inout")


class ManifestError(ValueError):
    pass


@dataclass(frozen=True)
class ArgSpec:
    name: str
    kind: str  # "bo" | "u32" | "f32"
    dir: str | None = None  # for "bo": "in" | "out" | "inout"


@dataclass(frozen=True)
class KernelSpec:
    name: str
    cus: tuple[str, ...]
    args: tuple[ArgSpec, ...]

    def index(self, arg: str) -> int:
        for i, spec in enumerate(self.args):
            if spec.name == arg:
                return i
        raise ManifestError(f"kernel {self.name} has no argument {arg!r}")

    def require(self, names: tuple[str, ...]) -> None:
        """Fail early, naming what is missing, when a manifest lacks arguments the driver sets."""
        missing = sorted(set(names) - {a.name for a in self.args})
        if missing:
            raise ManifestError(f"kernel {self.name} lacks argument(s) {', '.join(missing)}")


@dataclass(frozen=True)
class Manifest:
    name: str
    platform: str
    xclbin: str
    kernels: dict[str, KernelSpec]
    path: Path

    def kernel(self, name: str) -> KernelSpec:
        try:
            return self.kernels[name]
        except KeyError:
            raise ManifestError(f"{self.path}: no kernel {name!r}") from None


def _field(obj: dict, key: str, kind: type, where: str):
    if not isinstance(obj, dict) or key not in obj:
        raise ManifestError(f"{where}: missing {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (kind is str and not value):
        raise ManifestError(f"{where}: {key!r} must be a non-empty {kind.__name__}")
    return value


def _arg(obj: dict, where: str) -> ArgSpec:
    name = _field(obj, "name", str, where)
    kind = _field(obj, "kind", str, f"{where} {name}")
    if kind not in ARG_KINDS:
        raise ManifestError(f"{where} {name}: kind {kind!r} not in {ARG_KINDS}")
    direction = obj.get("dir")
    if kind == "bo" and direction not in BO_DIRS:
        raise ManifestError(f"{where} {name}: a bo argument needs dir in {BO_DIRS}")
    if kind != "bo" and direction is not None:
        raise ManifestError(f"{where} {name}: only bo arguments have a dir")
    return ArgSpec(name, kind, direction)


def _kernel(obj: dict, where: str) -> KernelSpec:
    name = _field(obj, "name", str, where)
    where = f"{where} {name}"
    cus = _field(obj, "cus", list, where)
    if not cus or not all(isinstance(c, str) and c for c in cus) or len(set(cus)) != len(cus):
        raise ManifestError(f"{where}: cus must be a non-empty list of distinct names")
    args = tuple(_arg(a, f"{where} arg {i}") for i, a in enumerate(_field(obj, "args", list, where)))
    if len({a.name for a in args}) != len(args):
        raise ManifestError(f"{where}: argument names must be distinct")
    return KernelSpec(name, tuple(cus), args)


def parse_manifest(doc: dict, path: Path) -> Manifest:
    where = str(path)
    kernels = [_kernel(k, f"{where} kernel {i}")
               for i, k in enumerate(_field(doc, "kernels", list, where))]
    by_name = {k.name: k for k in kernels}
    if len(by_name) != len(kernels):
        raise ManifestError(f"{where}: kernel names must be distinct")
    all_cus = [cu for k in kernels for cu in k.cus]
    if len(set(all_cus)) != len(all_cus):
        raise ManifestError(f"{where}: a CU name is used by two kernels")
    return Manifest(_field(doc, "name", str, where), _field(doc, "platform", str, where),
                    _field(doc, "xclbin", str, where), by_name, path)


def load_manifest(path: str | os.PathLike) -> Manifest:
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ManifestError(f"cannot read manifest {path}: {exc}") from None
    return parse_manifest(doc, path)
