"""Builds a testbench's C model (the HLS kernel's own C++ behind an extern "C" shim) with g++."""

from __future__ import annotations

import subprocess
from pathlib import Path


def build_shared_library(sources: list[Path], output: Path) -> Path:
    """Compiles sources into the shared library output (rebuilt only when a source is newer)."""
    newest = max(source.stat().st_mtime for source in sources)
    if output.exists() and output.stat().st_mtime >= newest:
        return output
    output.parent.mkdir(parents=True, exist_ok=True)
    command = ["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-o", str(output), *map(str, sources)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return output
