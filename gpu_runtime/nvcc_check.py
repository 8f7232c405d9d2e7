"""Every CUDA kernel variant the zoo models lower to at the shapes the batcher sends, and the
executor's two markers (`kernels.markers`), compiled ahead with nvcc (no GPU needed) into the cubin
cache the cupy executor loads (`gpu_runtime.kernels.cubins`), with per variant the registers,
spills, stack and shared memory ptxas reports.

    python -m gpu_runtime.nvcc_check [--arch 80,90] [--batches 1 32] [--frames 300] [--json out.json]

Exits 1 when a kernel does not compile or spills. Cached variants are not rebuilt.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

from gpu_runtime.compiler.importer import PRECISIONS, import_model
from gpu_runtime.kernels import cubins, markers
from gpu_runtime.program import KernelDef
from gpu_runtime.vgpu.batches import batch_sizes
from gpu_runtime.zoo import MODELS, build

# The batcher's shapes: the batch sizes a vGPU builds up to the zoo's max_batch_size of 32, and
# the padded lengths of the 2.5 s audio buckets up to the default 30 s (batching.buckets; one
# frame per 10 ms, T frames spanning T - 1 hops: atoll.supervisor.lengths).
BATCHES = batch_sizes(32)
AUDIO_FRAMES = tuple(250 * k + 1 for k in range(1, 13))


def zoo_programs(models, batches, precisions, frames=AUDIO_FRAMES):
    """(key, program) of every (model, batch, length, precision) the arguments name."""
    for name in models:
        model = build(name)
        lengths = frames if MODELS[name].kind == "audio" else (None,)
        for batch in batches:
            for length in lengths:
                for precision in precisions:
                    key = f"{name}/b{batch}" + (f"/t{length}" if length else "") + f"/{precision}"
                    yield key, import_model(model, batch, length, precision=precision)


def zoo_kernels(models, batches, precisions, frames=AUDIO_FRAMES) -> dict[str, KernelDef]:
    """The distinct kernels of every program `zoo_programs` yields."""
    kernels: dict[str, KernelDef] = {}
    for _, program in zoo_programs(models, batches, precisions, frames):
        kernels.update(program.kernels())
    return kernels


def check(kernels: dict[str, KernelDef], archs, jobs: int | None = None) -> list[cubins.Report]:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise FileNotFoundError("nvcc is not on PATH")
    return cubins.build(kernels.values(), archs, nvcc, jobs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="80,90", help="comma-separated, e.g. 80,90 or sm_90")
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=list(BATCHES))
    parser.add_argument("--frames", nargs="+", type=int, default=list(AUDIO_FRAMES),
                        help="audio lengths in frames")
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS))
    parser.add_argument("--jobs", type=int, default=None, help="nvcc processes at a time")
    parser.add_argument("--json", help="write the reports here")
    parser.add_argument("--quiet", action="store_true", help="only the summary and failures")
    args = parser.parse_args(argv)
    archs = [cubins.arch_of(a) for a in args.arch.split(",") if a]
    kernels = markers.KERNELS | zoo_kernels(args.models, args.batches, args.precisions, args.frames)
    reports = check(kernels, archs, args.jobs)
    bad = [r for r in reports if not r.ok or r.spills]
    if not args.quiet:
        print(f"{'kernel':70s} {'arch':>4s} {'regs':>5s} {'smem':>6s} {'stack':>5s} {'spill':>5s}")
        for r in sorted(reports, key=lambda r: (r.arch, -r.registers, r.name)):
            print(f"{r.name:70s} {r.arch:>4s} {r.registers:5d} {r.smem:6d} {r.stack:5d} "
                  f"{r.spills:5d}" + ("  FAILED" if not r.ok else ""))
    for r in bad:
        print(f"\n{r.name} (sm_{r.arch}):\n{r.log}", file=sys.stderr)
    print(f"{len(kernels)} variants x {len(archs)} architectures ({', '.join('sm_' + a for a in archs)}):"
          f" {len(reports)} cubins in {cubins.CACHE}, {len(bad)} failed or spilled")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in reports], indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
