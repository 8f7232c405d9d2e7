"""Builds a testbench's C model (the HLS kernel's own C++ behind an extern "C" shim) with g++."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

HLS = Path(__file__).resolve().parent.parent / "hls"
# -ffp-contract=off: every float32 operation rounds on its own, as in the RTL units and in NumPy.
CXXFLAGS = ("-O2", "-std=c++17", "-ffp-contract=off", "-shared", "-fPIC", "-Wno-unknown-pragmas")
INCLUDE_DIRS = (HLS / "common", HLS / "image", HLS / "audio")


def build_shared_library(sources: list[Path], headers: list[Path], build_dir: Path, name: str) -> Path:
    """Compiles sources into build_dir/lib<name>-<hash>.so, reusing a build whose sources and
    headers (every file they may include) have the same contents. The kernel folders are on the
    include path, as in fpga_host's C-simulation build."""
    digest = hashlib.sha256("\0".join(CXXFLAGS).encode())
    for path in [*sources, *sorted(headers)]:
        digest.update(path.read_bytes())
    output = build_dir / f"lib{name}-{digest.hexdigest()[:16]}.so"
    if output.exists():
        return output
    build_dir.mkdir(parents=True, exist_ok=True)
    partial = output.with_suffix(f".{os.getpid()}.tmp")  # pytest-xdist's workers may build it at once
    command = ["g++", *CXXFLAGS, *(f"-I{d}" for d in INCLUDE_DIRS), "-o", str(partial), *map(str, sources)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"C model build failed: {' '.join(command)}\n{result.stderr}")
    partial.replace(output)
    return output
