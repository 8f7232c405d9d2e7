"""Kernels compiled ahead: a cubin per kernel variant and GPU architecture, built with nvcc into a
cache keyed by the kernel's source, the architecture and the flags, so the cupy executor loads
machine code (cupy.RawModule(path=...)) instead of compiling each variant with NVRTC at load.
NVRTC stays the fallback for a variant or an architecture the cache lacks.

Each cubin sits beside its ptxas report (registers, shared memory, stack frame, spills). The cache
is filled by `python -m gpu_runtime.nvcc_check --arch 80,90` (every variant the zoo needs) and by
tools/gpu_acceptance.sh; it is never committed (build/ is ignored).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from gpu_runtime.program import KernelDef

CACHE = Path(os.environ.get("ATOLL_CUBIN_DIR")
             or Path(__file__).resolve().parents[2] / "build" / "cubins")
FLAGS = ("-cubin", "--std=c++14", "-Xptxas", "-v")
_USED = re.compile(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclass
class Report:
    """What nvcc said of one variant for one architecture."""

    name: str
    arch: str
    ok: bool
    registers: int = 0
    smem: int = 0
    stack: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    log: str = ""

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


def arch_of(value) -> str:
    """'90' from 90, '90', 'sm_90' or a CuPy compute capability string."""
    text = str(value).removeprefix("sm_").removeprefix("compute_")
    if not text.isdigit():
        raise ValueError(f"not a GPU architecture: {value!r} (give e.g. 80, 90 or sm_90)")
    return text


def cubin_path(kernel: KernelDef, arch, root: Path | None = None) -> Path:
    """Where the cubin of `kernel` for `arch` lives in the cache (whether or not it exists)."""
    arch = arch_of(arch)
    text = "\0".join((arch, " ".join(FLAGS), kernel.cuda_source))
    key = hashlib.sha256(text.encode()).hexdigest()[:20]
    return (root or CACHE) / f"sm_{arch}" / f"{kernel.name}-{key}.cubin"


def cached(kernel: KernelDef, arch, root: Path | None = None) -> Path | None:
    """The cubin to load for `kernel` on a GPU of `arch`, or None (compile with NVRTC)."""
    path = cubin_path(kernel, arch, root)
    return path if path.is_file() else None


def parse_ptxas(name: str, arch: str, returncode: int, log: str) -> Report:
    report = Report(name, arch, returncode == 0, log=log if returncode else "")
    used, frame = _USED.search(log), _FRAME.search(log)
    if used:
        report.registers, report.smem = int(used.group(1)), int(used.group(2) or 0)
    if frame:
        report.stack, report.spill_stores, report.spill_loads = map(int, frame.groups())
    return report


def compile_cubin(kernel: KernelDef, arch, nvcc: str = "nvcc", root: Path | None = None) -> Report:
    """nvcc-compiles `kernel` for `arch` into the cache (a cached variant is not rebuilt)."""
    arch = arch_of(arch)
    path = cubin_path(kernel, arch, root)
    report_path = path.with_suffix(".json")
    if path.is_file() and report_path.is_file():
        return Report(**json.loads(report_path.read_text()))
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        src, out = Path(tmp) / f"{kernel.name}.cu", Path(tmp) / "k.cubin"
        src.write_text(kernel.cuda_source)
        run = subprocess.run([nvcc, f"-arch=sm_{arch}", *FLAGS, "-o", str(out), str(src)],
                             capture_output=True, text=True, check=False)
        report = parse_ptxas(kernel.name, arch, run.returncode, run.stdout + run.stderr)
        if report.ok:  # renamed into place: a reader never sees half a cubin
            os.replace(out, path)
            report_path.write_text(json.dumps(asdict(report)))
    return report


def build(kernels, archs, nvcc: str = "nvcc", jobs: int | None = None,
          root: Path | None = None) -> list[Report]:
    """Every kernel for every architecture, `jobs` nvcc processes at a time."""
    work = [(k, arch_of(a)) for a in archs for k in kernels]
    with ThreadPoolExecutor(jobs or os.cpu_count() or 2) as pool:
        return list(pool.map(lambda ka: compile_cubin(ka[0], ka[1], nvcc, root), work))
