#!/usr/bin/env python3
"""Which installed distributions a Python entry point imports when it starts: its module (or
script, or test files) is imported in a fresh interpreter and every top-level module that is
neither the standard library nor Atoll's own is traced back to the distribution that installed
it. tests/tools compares the answer for each step of tools/gpu_acceptance.sh with the GPU
machine image's package list (tools/gpu_image_packages.txt) and the wheels it may carry.

    python3 tools/image_imports.py ENTRY ...     ENTRY: a module (-m name), a script or a test file
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OURS = {"atoll", "batching", "fpga_host", "gpu_runtime", "hls", "scheduler", "sim_tb", "tests", "tools"}


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def package_list(path: Path) -> set[str]:
    """The distributions a package list file names (the first word of a line; '#' starts a
    comment)."""
    lines = (line.split("#")[0].split() for line in path.read_text().splitlines())
    return {normalize(words[0]) for words in lines if words}


def _module_of(entry: str) -> str:
    """The dotted module an entry names: 'gpu_runtime.nvcc_check', or a file under ROOT."""
    path = Path(entry)
    if entry.endswith(".py"):
        return ".".join(path.with_suffix("").parts)
    return entry


def _trace(entries: list[str]) -> list[str]:
    """In this (fresh) interpreter: import the entries, return the new top-level modules."""
    sys.path.insert(0, str(ROOT))
    before = set(sys.modules)
    for entry in entries:
        importlib.import_module(_module_of(entry))
    return sorted({m.split(".")[0] for m in set(sys.modules) - before})


def distributions(entries: list[str], python: str = sys.executable) -> set[str]:
    """The distributions (normalized names) `entries` import at start, traced in `python`."""
    run = subprocess.run([python, __file__, "--trace", *entries], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    modules = json.loads(run.stdout.splitlines()[-1])
    owners = importlib.metadata.packages_distributions()
    found = set()
    for module in modules:
        if module in OURS or module in sys.stdlib_module_names:
            continue
        dists = owners.get(module)
        if dists:
            found |= {normalize(d) for d in dists}
        elif not (module.startswith("_") or module == "cython_runtime"):
            # (those are made at run time: Cython's runtime, multiprocessing's __mp_main__ ...)
            raise LookupError(f"{entries}: module {module!r} belongs to no installed distribution")
    return found


if __name__ == "__main__":
    if sys.argv[1:2] == ["--trace"]:
        print(json.dumps(_trace(sys.argv[2:])))
    else:
        print("\n".join(sorted(distributions(sys.argv[1:]))))
