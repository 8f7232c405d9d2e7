"""`atoll demo`: start the server on CPU defaults, drive it with generated media, print a summary.

It drives every model taking a JPEG or WAV (`atoll.preprocess`) and every ensemble whose input
feeds one (e.g. examples/python_pipeline's `classify`), the ensemble in place of its steps. A
repository of stateful models only (sequence batching) is not demo material: it says what to run."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request

import numpy as np
from gpu_runtime.executors import EXECUTOR_CHOICES, EXECUTORS
from prometheus_client.parser import text_string_to_metric_families
from scheduler.policies import POLICIES

from atoll.bench.bodies import infer_body
from atoll.bench.corpus import jpeg_bytes, synthetic_wav
from atoll.bench.loadgen import IMAGE_SIZES, Workload, format_table, run_load
from atoll.repository.demo import demo_repository
from atoll.repository.specs import ModelSpec, RepositoryError, load_repository
from atoll.supervisor.server_process import ServerProcess


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="end-to-end demo: server + load generator + summary")
    p.add_argument("--requests", type=int, default=300, help="requests to send (default 300)")
    p.add_argument("--rate", type=float, default=12.0, help="mean arrival rate, req/s (default 12)")
    p.add_argument("--arrival", choices=("poisson", "uniform"), default="poisson")
    p.add_argument("--audio-share", type=float, default=0.2,
                   help="fraction of requests carrying WAV audio when an audio model is served")  # fmt: skip
    p.add_argument("--rt-share", type=float, default=0.1,
                   help="fraction of requests sent as real-time (Triton priority 1; default 0.1)")
    p.add_argument("--repository", help="model repository (default: the built-in demo)")
    p.add_argument("--executor", choices=EXECUTOR_CHOICES,
                   help="passed to `atoll serve` (" + ", ".join(
                       n for n, s in EXECUTORS.items() if s.preemptible) + " run the REEF scheduler)")
    p.add_argument("--policy", choices=tuple(POLICIES),
                   help="passed to `atoll serve`: preemption policy in the vGPU workers")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print only the JSON summary line")
    p.set_defaults(func=run)


def media_inputs(specs: dict[str, ModelSpec]) -> dict[str, tuple[str, str]]:
    """The models the demo drives: name -> (the BYTES input it sends the file to, "image" or
    "audio"). A media model, or an ensemble with an input some step's media model reads as its
    file; that model is then driven through the ensemble only."""
    out = {name: (spec.raw_input, spec.preprocess) for name, spec in specs.items()
           if spec.ensemble is None and spec.preprocess != "none"}  # fmt: skip
    steps = set()
    for name, spec in specs.items():
        for step in spec.ensemble.steps if spec.ensemble else ():
            media = specs.get(step.model_name)
            for key, tensor in step.input_map:
                if media is not None and media.preprocess != "none" and key == media.raw_input:
                    out[name] = (tensor, media.preprocess)
                    steps.add(step.model_name)
    return {name: found for name, found in out.items() if name not in steps}


def _workloads(url: str, media: dict[str, tuple[str, str]], seed: int, audio_share: float, rt_share: float):
    rng = np.random.default_rng(seed)
    with urllib.request.urlopen(urllib.request.Request(f"{url}/v2/repository/index", method="POST")) as r:
        served = {entry["name"] for entry in json.load(r) if entry.get("state", "READY") == "READY"}
    workloads = []
    for name, (raw, kind) in media.items():
        if name not in served:
            continue
        if kind == "image":
            files = [jpeg_bytes(*IMAGE_SIZES[i % len(IMAGE_SIZES)], seed=seed + i) for i in range(24)]
            weight = 1.0 - audio_share
        else:
            files = [synthetic_wav(rng, float(rng.uniform(1.0, 8.0))) for _ in range(8)]
            weight = audio_share
        for priority, share, label in ((0, 1.0 - rt_share, name), (1, rt_share, f"{name} (rt)")):
            if weight * share > 0:
                bodies = [infer_body(raw, [f], priority) for f in files]
                workloads.append(Workload(name, raw, bodies, weight * share, label))
    return workloads


def _nothing_to_drive(repository, specs: dict[str, ModelSpec]) -> str:
    """What to say (and to run instead) when no model takes a JPEG or WAV."""
    stateful = sorted(name for name, spec in specs.items() if spec.sequence is not None)
    if not stateful:
        return "atoll demo: the repository serves no model with a JPEG/WAV input"
    return (f"atoll demo: the repository serves no model with a JPEG/WAV input; {', '.join(stateful)} "
            "take sequences (sequence batching), which the demo does not drive: run `atoll serve "
            f"--repository {repository}` and send sequences with Triton's sequence example clients or "
            "sequence_id/sequence_start/sequence_end requests (examples/sequence_accumulator/README.md)")


def _batch_summary(url: str) -> dict[str, float]:
    """Mean batch size per model, from the server's own Prometheus metrics."""


    with urllib.request.urlopen(f"{url}/metrics") as r:
        text = r.read().decode()
    sums, counts = {}, {}
    for family in text_string_to_metric_families(text):
        if family.name != "atoll_batch_size":
            continue
        for s in family.samples:
            model = s.labels.get("model")
            if s.name.endswith("_sum"):
                sums[model] = sums.get(model, 0.0) + s.value
            elif s.name.endswith("_count"):
                counts[model] = counts.get(model, 0.0) + s.value
    return {m: round(sums[m] / counts[m], 2) for m in sums if counts.get(m)}


def run(args) -> int:
    for flag, share in (("--audio-share", args.audio_share), ("--rt-share", args.rt_share)):
        if not 0.0 <= share <= 1.0:
            print(f"atoll demo: {flag} must be between 0 and 1, got {share}", file=sys.stderr)
            return 2
    extra = [f"--{flag}={value}" for flag, value in
             (("repository", args.repository), ("executor", args.executor), ("policy", args.policy))
             if value]  # fmt: skip
    repository = args.repository or demo_repository(progress=not args.json)
    try:
        specs = load_repository(repository)
    except RepositoryError as exc:
        print(f"atoll demo: {exc}", file=sys.stderr)
        return 2
    media = media_inputs(specs)
    if not media:  # said before a server starts for nothing
        print(_nothing_to_drive(repository, specs), file=sys.stderr)
        return 2
    with ServerProcess(extra) as server:
        workloads = _workloads(server.url, media, args.seed, args.audio_share, args.rt_share)
        if not workloads:
            print("atoll demo: the server serves none of " + ", ".join(media), file=sys.stderr)
            return 2
        summary = asyncio.run(run_load(server.url, workloads, args.requests, args.rate, args.arrival,
                                       args.seed, progress=not args.json))  # fmt: skip
        batches = _batch_summary(server.url)
    result = summary.to_dict() | {"mean_batch_size": batches}
    if not args.json:
        print(format_table(summary))
        print("mean batch size: " + ", ".join(f"{m} {b}" for m, b in batches.items()))
    print(json.dumps(result, separators=(",", ":")))
    return 0 if summary.errors == 0 else 1
