"""Native helpers of the GPU runtime (the RT launcher, the CUDA emulator's kernels) and of the server
above it (the cluster endpoint's relay, `atoll.cluster.relay`; a front end's intake,
`atoll.front_end.intake`) built with the system compiler on first use and cached by content.

`build_library(sources, flags, name)` compiles the sources into build/<kind>/<hash>/<name>, the
hash covering the compiler, the flags and every source's bytes (headers listed among the sources
count too), so an edit rebuilds and an unchanged tree reuses; concurrent builds write a private
name and rename it into place; `extension_module` builds a CPython extension so and imports it.
(fpga_host builds its C simulation the same way with its own helper: the two packages import
nothing of each other, ARCHITECTURE §2.)
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

BUILD_ROOT = Path(__file__).resolve().parent.parent / "build"


class NativeBuildError(RuntimeError):
    """The compiler is missing or rejected the sources; `stderr` holds its output verbatim."""

    def __init__(self, message: str, stderr: str = ""):
        super().__init__(message + (f"\n{stderr}" if stderr else ""))
        self.stderr = stderr


def build_library(sources: list[Path], flags: tuple[str, ...], name: str, kind: str,
                  compiler: str, libraries: tuple[str, ...] = ()) -> Path:
    """The compiled shared library (sources ending in .h are hashed, not compiled)."""
    digest = hashlib.sha256("\0".join((compiler, *flags, *libraries)).encode())
    for path in sources:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    target = BUILD_ROOT / kind / digest.hexdigest()[:16] / name
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=target.parent)
    os.close(fd)
    units = [str(p) for p in sources if p.suffix != ".h"]
    includes = [f"-I{d}" for d in dict.fromkeys(p.parent for p in sources)]
    command = [compiler, *flags, *includes, *units, "-o", tmp, *libraries]
    try:
        done = subprocess.run(command, capture_output=True, text=True)
    except OSError as e:
        os.unlink(tmp)
        raise NativeBuildError(f"no compiler to build {name} ({compiler}: {e})") from None
    if done.returncode:
        os.unlink(tmp)
        raise NativeBuildError(f"building {name} failed: {' '.join(command)}", done.stderr)
    os.replace(tmp, target)
    return target


def extension_module(sources: list[Path], module: str, kind: str) -> ModuleType:
    """A CPython extension `module` (its `PyInit_<module>`) built from `sources` with the system
    compiler ($CC, else cc) and imported; `NativeBuildError` without a compiler or Python's headers."""
    flags = ("-O2", "-shared", "-fPIC", "-std=c11", f"-I{sysconfig.get_paths()['include']}")
    name = module + sysconfig.get_config_var("EXT_SUFFIX")
    path = build_library(sources, flags, name, kind, os.environ.get("CC", "cc"), ("-pthread",))
    spec = importlib.util.spec_from_file_location(module, path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded
