"""`atoll preprocess image|audio FILE...`: run the DPU preprocessing (or its CPU path) on files.

One .npy per input (named after the file) goes to --out; --json prints one JSON line per input.
A file that fails is reported with its reason, the others are still processed, and the command
exits 1 at the end. Stereo (or multi-channel) audio is downmixed to mono by averaging channels.
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np
import soundfile as sf
from fpga_host import BACKEND_CHOICES
from fpga_host.dpu_driver import BackendUnavailable
from fpga_host.manifest import ManifestError
from fpga_host.preprocessor import Preprocessor
from fpga_host.status import PreprocessError
from tqdm import tqdm


def register(subparsers) -> None:
    parser = subparsers.add_parser("preprocess", help="preprocess image or audio files to .npy")
    sub = parser.add_subparsers(dest="modality", metavar="MODALITY")
    sub.required = True
    image = sub.add_parser("image", help="JPEG files -> decoded/resized/cropped/normalised arrays")
    image.add_argument("--stage", choices=("decode", "resize", "crop", "normalize"), default="normalize")
    image.add_argument("--resize-short", type=int, default=256, help="shorter side after resize")
    image.add_argument("--crop", type=int, default=224, help="centre crop size")
    image.add_argument("--fp16", action="store_true", help="float16 output for --stage normalize")
    image.add_argument("--max-dim", type=int, default=8192, help="largest accepted width/height")
    audio = sub.add_parser("audio", help="WAV/FLAC files -> (80, T) log-mel, optionally normalised")
    audio.add_argument("--stage", choices=("mel", "normalize"), default="normalize")
    audio.add_argument("--max-seconds", type=float, default=30.0, help="longest accepted clip")
    for p in (image, audio):
        p.add_argument("files", nargs="+", metavar="FILE")
        p.add_argument("--backend", choices=BACKEND_CHOICES, default=BACKEND_CHOICES[0])
        p.add_argument("--out", required=True, type=Path, help="directory for the .npy files")
        p.add_argument("--json", action="store_true", help="one JSON line per input on stdout")
        p.add_argument("--manifest", type=Path, default=None,
                       help="DPU manifest (default bitstreams/atoll_dpu.json; its xclbin sits beside it)")
        p.add_argument("--cpu-workers", type=int, default=None,
                       help="CPU preprocessing processes (default: all cores without a DPU)")
        p.set_defaults(func=run)


def read_audio(path: Path):
    """(mono PCM, sample rate): int16 kept as int16 for 16-bit mono files, else float32."""

    info = sf.info(str(path))
    exact_int16 = info.channels == 1 and info.subtype == "PCM_16"
    pcm, rate = sf.read(str(path), dtype="int16" if exact_int16 else "float32", always_2d=True)
    if pcm.shape[1] > 1:
        pcm = pcm.mean(axis=1, dtype=np.float32)  # downmix to mono
    return np.ascontiguousarray(pcm.reshape(-1)), rate


def output_names(files: list[Path]) -> list[str]:
    """`<stem>.npy` per input; a repeated stem gets `-2`, `-3`, ... so no output is overwritten."""
    seen: dict[str, int] = {}
    names = []
    for f in files:
        seen[f.stem] = seen.get(f.stem, 0) + 1
        names.append(f"{f.stem}.npy" if seen[f.stem] == 1 else f"{f.stem}-{seen[f.stem]}.npy")
    return names


def run(args) -> int:
    options = {"cpu_workers": args.cpu_workers, "manifest": args.manifest}
    if args.modality == "image":
        options.update(resize_short=args.resize_short, crop=args.crop, fp16=args.fp16,
                       max_image_dim=args.max_dim)
    else:
        options.update(max_audio_seconds=args.max_seconds)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        pre = Preprocessor(args.backend, **options)
    except (BackendUnavailable, ManifestError, ValueError, OSError) as exc:
        print(f"atoll preprocess: error: {exc}", file=sys.stderr)
        return 2
    with pre:
        failed = process(pre, args)
    if not args.json:
        print(f"{len(args.files) - failed}/{len(args.files)} files preprocessed "
              f"({pre.backend}) into {args.out}", file=sys.stderr)
    return 1 if failed else 0


def process(pre, args) -> int:
    """Submits files with a bounded number in flight; returns how many failed."""

    files = [Path(f) for f in args.files]
    names = output_names(files)
    window = deque()
    failed = 0
    in_flight = 4 * max(1, pre.parallelism)
    with tqdm(total=len(files), unit="file", disable=len(files) < 2 or None, file=sys.stderr) as bar:
        for index, path in enumerate(files):
            window.append((path, names[index], time.perf_counter(), submit(pre, args, path)))
            while len(window) >= in_flight or (index == len(files) - 1 and window):
                failed += not report(*window.popleft(), args, np)
                bar.update()
    return failed


def submit(pre, args, path: Path):
    """The Future of one file's Result, or the exception reading it raised."""
    try:
        if args.modality == "image":
            return pre.submit_image(path.read_bytes(), args.stage)
        pcm, rate = read_audio(path)
        return pre.submit_audio(pcm, rate, args.stage)
    except Exception as exc:  # unreadable file: reported like any other failure
        return exc


def report(path: Path, name: str, started: float, future, args, np) -> bool:
    record = {"file": str(path)}
    try:
        if isinstance(future, Exception):
            raise future
        result = future.result()
    except PreprocessError as exc:
        record.update(status=exc.status.name, error=exc.reason)
    except Exception as exc:  # unreadable or unsupported container, worker crash
        record.update(status="ERROR", error=f"{type(exc).__name__}: {exc}")
    else:
        np.save(args.out / name, result.array)
        record.update(backend=result.backend, status=result.status.name,
                      shape=list(result.array.shape), dtype=str(result.array.dtype),
                      ms=round(result.timings.get("total_ms", 0.0), 3), out=str(args.out / name))
        if result.fallback_reason:
            record["fallback_reason"] = result.fallback_reason
    record.setdefault("ms", round((time.perf_counter() - started) * 1e3, 3))
    if args.json:
        print(json.dumps(record), flush=True)
    elif "error" in record:
        print(f"{path}: {record['status']}: {record['error']}", file=sys.stderr)
    return "error" not in record
