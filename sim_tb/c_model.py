"""Builds a testbench's C model (the HLS kernel's own C++ behind an extern "C" shim) with g++."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path


def build_shared_library(sources: list[Path], headers: list[Path], build_dir: Path, name: str) -> Path:
    """Compiles sources into build_dir/lib<name>-<hash>.so, reusing a build whose sources and
    headers (every file they may include) have the same contents."""
    digest = hashlib.sha256()
    for path in [*sources, *sorted(headers)]:
        digest.update(path.read_bytes())
    output = build_dir / f"lib{name}-{digest.hexdigest()[:16]}.so"
    if output.exists():
        return output
    build_dir.mkdir(parents=True, exist_ok=True)
    partial = output.with_suffix(".tmp")
    command = ["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-o", str(partial), *map(str, sources)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    partial.replace(output)
    return output
