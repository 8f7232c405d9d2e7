"""Every CUDA kernel variant the zoo models lower to, compiled for a GPU with nvcc (no GPU needed):
compile errors, and per kernel the registers, spills, stack and shared memory ptxas reports.

    python -m gpu_runtime.nvcc_check [--arch sm_90] [--batches 1 32] [--json out.json]

Exits 1 when a kernel does not compile or spills. Results are cached per source and flags under
build/nvcc/, so a re-run only compiles what changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from gpu_runtime.compiler.importer import PRECISIONS, import_model
from gpu_runtime.program import KernelDef
from gpu_runtime.zoo import MODELS, build

CACHE = Path(__file__).resolve().parents[2] / "build" / "nvcc"
AUDIO_FRAMES = 300
_USED = re.compile(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclass
class Report:
    name: str
    ok: bool
    registers: int = 0
    smem: int = 0
    stack: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    log: str = ""


def zoo_kernels(models, batches, precisions) -> dict[str, KernelDef]:
    """The distinct kernels of every (model, batch, precision) program."""
    kernels: dict[str, KernelDef] = {}
    for name in models:
        model = build(name)
        length = AUDIO_FRAMES if MODELS[name].kind == "audio" else None
        for batch in batches:
            for precision in precisions:
                kernels.update(import_model(model, batch, length, precision=precision).kernels())
    return kernels


def compile_kernel(kernel: KernelDef, arch: str, nvcc: str = "nvcc") -> Report:
    flags = [f"-arch={arch}", "-cubin", "-Xptxas", "-v", "--std=c++14"]
    key = hashlib.sha256((kernel.cuda_source + " ".join(flags)).encode()).hexdigest()[:20]
    cached = CACHE / arch / f"{kernel.name}-{key}.json"
    if cached.exists():
        return Report(**json.loads(cached.read_text()))
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"{kernel.name}.cu"
        src.write_text(kernel.cuda_source)
        run = subprocess.run([nvcc, *flags, "-o", str(Path(tmp) / "k.cubin"), str(src)],
                             capture_output=True, text=True)
    log = run.stdout + run.stderr
    report = Report(kernel.name, run.returncode == 0, log=log if run.returncode else "")
    used, frame = _USED.search(log), _FRAME.search(log)
    if used:
        report.registers, report.smem = int(used.group(1)), int(used.group(2) or 0)
    if frame:
        report.stack, report.spill_stores, report.spill_loads = map(int, frame.groups())
    if report.ok:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(asdict(report)))
    return report


def check(kernels: dict[str, KernelDef], arch: str) -> list[Report]:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise FileNotFoundError("nvcc is not on PATH")
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        return list(pool.map(lambda k: compile_kernel(k, arch, nvcc), kernels.values()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS))
    parser.add_argument("--json", help="write the reports here")
    args = parser.parse_args(argv)
    reports = check(zoo_kernels(args.models, args.batches, args.precisions), args.arch)
    bad = [r for r in reports if not r.ok or r.spill_stores or r.spill_loads]
    print(f"{'kernel':70s} {'regs':>5s} {'smem':>6s} {'stack':>5s} {'spill':>5s}")
    for r in sorted(reports, key=lambda r: (-r.registers, r.name)):
        print(f"{r.name:70s} {r.registers:5d} {r.smem:6d} {r.stack:5d} "
              f"{r.spill_stores + r.spill_loads:5d}" + ("  FAILED" if not r.ok else ""))
    for r in bad:
        print(f"\n{r.name}:\n{r.log}", file=sys.stderr)
    print(f"{len(reports)} kernels for {args.arch}: {len(bad)} failed or spilled")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in reports], indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
